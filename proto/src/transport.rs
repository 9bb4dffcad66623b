//! HTTP/2 settings every embedwire peer should use, so the server, the gateway, the
//! clients and the benchmarks agree on them.

/// The largest HTTP/2 DATA frame a peer accepts (SETTINGS_MAX_FRAME_SIZE). The
/// protocol's 16 KiB default cuts a 256 x 384 FLOAT32 answer (393 KB) into 25
/// frames, and the sender pays a write system call for each (hyper's h2 flushes
/// every large frame on its own): those writes took 15 % of the server's CPU on
/// such calls, 8 % in one frame. 1 MiB carries such an answer in one frame; the
/// peer's flow-control window (2 MiB per stream in hyper) still bounds what is in
/// flight.
pub const MAX_FRAME_SIZE: u32 = 1 << 20;
