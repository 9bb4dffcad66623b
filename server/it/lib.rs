//! Nothing: this package holds the server's integration tests (`tests/it`); Cargo wants a
//! library or a binary in every package.
