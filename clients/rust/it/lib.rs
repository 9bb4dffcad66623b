//! Nothing: this package holds integration tests (`tests/it`); Cargo wants a library or a
//! binary in every package.
