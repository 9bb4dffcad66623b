//! Ports for the servers the tests start and restart.

/// A random port below the kernel's ephemeral range (`ip_local_port_range`), with its
/// successor below it too. Not port 0: the kernel would pick from that range, and a
/// node restarted on its ports finds one taken whenever an outgoing connection got it
/// as its source port while the node was down (scripts/cluster.sh saw a Weaviate
/// node's Raft RPC port taken so). 0 (any port) where the range leaves no room below it.
pub fn candidate() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    const LOWEST: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_low <= LOWEST + 1_000 {
        return 0;
    }
    // A fresh randomly keyed hasher per call: random enough to spread the picks.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    LOWEST + (random % u64::from(ephemeral_low - 1 - LOWEST)) as u16
}
