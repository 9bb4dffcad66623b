//! embedwire HTTP layer (work in progress).
