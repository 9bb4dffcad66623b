//! embedwire client (work in progress).
