//! Transport conventions every embedwire peer shares, so the server, the gateway,
//! the clients and the benchmarks agree on them: HTTP/2 settings, the retry hint a
//! refusal carries, and the mark of an UNAVAILABLE answer a server made itself.

use std::time::Duration;

/// The largest HTTP/2 DATA frame a peer accepts (SETTINGS_MAX_FRAME_SIZE). The
/// protocol's 16 KiB default cuts a 256 x 384 FLOAT32 answer (393 KB) into 25
/// frames, and the sender pays a write system call for each (hyper's h2 flushes
/// every large frame on its own): those writes took 15 % of the server's CPU on
/// such calls, 8 % in one frame. 1 MiB carries such an answer in one frame; the
/// peer's flow-control window (2 MiB per stream in hyper) still bounds what is in
/// flight.
pub const MAX_FRAME_SIZE: u32 = 1 << 20;

/// The gRPC metadata key of a refusal's retry hint, in milliseconds: the key gRPC's
/// own retry design (A6) uses for server pushback, so gRPC clients that implement
/// retry policies honor it as well as ours. The server sets it on RESOURCE_EXHAUSTED
/// answers to overload; the HTTP layer turns it into `Retry-After`; the clients wait
/// at least this long before retrying.
pub const RETRY_PUSHBACK_METADATA: &str = "grpc-retry-pushback-ms";

/// Puts `retry_after` on `status` as its retry hint, in whole milliseconds rounded
/// up (at least 1: a zero hint would tell gRPC clients to stop retrying, per A6).
pub fn set_retry_pushback(status: &mut tonic::Status, retry_after: Duration) {
    let millis = retry_after.as_nanos().div_ceil(1_000_000).max(1);
    let value = millis.to_string().parse().expect("digits are valid metadata");
    status.metadata_mut().insert(RETRY_PUSHBACK_METADATA, value);
}

/// A status's retry hint, when it has a valid one (a non-negative integer of
/// milliseconds; A6 says a malformed or negative one means "do not retry", which
/// callers see here as no hint).
pub fn retry_pushback(status: &tonic::Status) -> Option<Duration> {
    let millis: u64 = status.metadata().get(RETRY_PUSHBACK_METADATA)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_millis(millis))
}

/// The gRPC metadata key an embedwire server puts on an UNAVAILABLE answer it made
/// itself (its store cannot serve this call, the model is loading), with what was
/// unavailable as the value. A transport failure (the server cannot be reached, the
/// connection broke) carries no such key. Gateways tell the two apart by it: a
/// server that answers is up and may take the next call; one that does not is
/// skipped for a cool-down.
pub const UNAVAILABLE_CAUSE_METADATA: &str = "x-embedwire-unavailable";

/// Marks `status` as an UNAVAILABLE answer the server made itself; `cause` is a
/// short token ("server").
pub fn set_unavailable_cause(status: &mut tonic::Status, cause: &'static str) {
    status.metadata_mut().insert(UNAVAILABLE_CAUSE_METADATA, tonic::metadata::MetadataValue::from_static(cause));
}

/// Whether an UNAVAILABLE `status` was answered by an embedwire server (see
/// [`UNAVAILABLE_CAUSE_METADATA`]) rather than made by the transport.
pub fn answered_unavailable(status: &tonic::Status) -> bool {
    status.metadata().get(UNAVAILABLE_CAUSE_METADATA).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_hint_survives_the_metadata() {
        let mut status = tonic::Status::resource_exhausted("busy");
        set_retry_pushback(&mut status, Duration::from_micros(12_300));
        assert_eq!(status.metadata().get(RETRY_PUSHBACK_METADATA).unwrap(), "13");
        assert_eq!(retry_pushback(&status), Some(Duration::from_millis(13)));
    }

    #[test]
    fn a_zero_hint_is_sent_as_one_millisecond() {
        let mut status = tonic::Status::resource_exhausted("busy");
        set_retry_pushback(&mut status, Duration::ZERO);
        assert_eq!(retry_pushback(&status), Some(Duration::from_millis(1)));
    }

    #[test]
    fn a_missing_or_malformed_hint_is_none() {
        let mut status = tonic::Status::resource_exhausted("busy");
        assert_eq!(retry_pushback(&status), None);
        status.metadata_mut().insert(RETRY_PUSHBACK_METADATA, "-5".parse().unwrap());
        assert_eq!(retry_pushback(&status), None);
    }
}
