//! The one error type of the client. A failed call keeps the gRPC status code and
//! the server's message (which names the field at fault), so
//! `error: INVALID_ARGUMENT: inputs[0]: ...` reaches the user unchanged; failures to
//! reach a server are told apart from answers of a server, because a caller handles
//! them differently (retry elsewhere vs. fix the request).

use std::error::Error as StdError;
use std::path::PathBuf;
use std::time::Duration;

use tonic::Code;

/// Result of every client call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An address is not a valid `http://` or `https://` URI.
    #[error("invalid server address `{address}`: {reason}")]
    InvalidAddress { address: String, reason: String },
    /// `Client::connect` was given no address.
    #[error("no server address given")]
    NoAddress,
    /// The API key cannot travel in an HTTP header.
    #[error("invalid API key: it must be printable ASCII")]
    InvalidApiKey,
    /// The CA file could not be read.
    #[error("cannot read CA file {}: {source}", path.display())]
    CaFile { path: PathBuf, source: std::io::Error },
    /// TLS was asked for (a CA file or an `https://` address) but could not be set up.
    #[error("TLS setup for {address}: {reason}")]
    Tls { address: String, reason: String },
    /// No connection to the server could be made, or it broke (retried first when
    /// the retry policy allows).
    #[error("cannot reach {address}: {reason}")]
    Unreachable { address: String, reason: String },
    /// The call took longer than its deadline.
    #[error("DEADLINE_EXCEEDED: no answer from {address} within {deadline:?}")]
    DeadlineExceeded { address: String, deadline: Duration },
    /// The server answered with an error status. `retry_after` is the server's
    /// hint of when the same call should work (`grpc-retry-pushback-ms` on an
    /// overload refusal).
    #[error("{}: {message}{}", code_name(*code), retry_hint(*retry_after))]
    Status { code: Code, message: String, address: String, retry_after: Option<Duration> },
    /// The server's answer does not have the promised shape.
    #[error("malformed answer from {address}: {reason}")]
    Protocol { address: String, reason: String },
    /// The request is invalid before it is sent (e.g. a zero batch size).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl Error {
    /// The gRPC code that best describes the error (UNAVAILABLE when the server
    /// could not be reached, INVALID_ARGUMENT for a request refused before sending).
    pub fn code(&self) -> Code {
        match self {
            Error::Status { code, .. } => *code,
            Error::Unreachable { .. } => Code::Unavailable,
            Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            Error::Protocol { .. } => Code::Internal,
            Error::InvalidRequest(_) => Code::InvalidArgument,
            Error::InvalidAddress { .. }
            | Error::NoAddress
            | Error::InvalidApiKey
            | Error::CaFile { .. }
            | Error::Tls { .. } => Code::InvalidArgument,
        }
    }

    /// The server's hint of how long to wait before sending the same call again,
    /// when it refused the call for overload (RESOURCE_EXHAUSTED with
    /// `grpc-retry-pushback-ms`). The client already waited and retried on it as
    /// long as its [`RetryPolicy`](crate::RetryPolicy) allowed.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// True when the server could not be reached or took too long: the request was
    /// not judged by the server, so it may succeed elsewhere or later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unreachable { .. } | Error::DeadlineExceeded { .. })
            || matches!(self, Error::Status { code: Code::Unavailable | Code::ResourceExhausted, .. })
    }

    /// Turns a failed call's status into an error, telling transport failures
    /// (tonic reports them as UNAVAILABLE or, for an expired deadline, CANCELLED)
    /// apart from the server's own answers.
    pub(crate) fn from_status(status: tonic::Status, address: &str, deadline: Option<Duration>) -> Error {
        let address = display_address(address);
        if let Some(deadline) = deadline
            && is_client_timeout(&status)
        {
            return Error::DeadlineExceeded { address, deadline };
        }
        if let Some(reason) = transport_failure(&status) {
            return Error::Unreachable { address, reason };
        }
        let retry_after = embedwire_proto::transport::retry_pushback(&status);
        Error::Status { code: status.code(), message: status.message().to_string(), address, retry_after }
    }
}

/// ` (retry after 120ms)` for a refusal with a hint, so the hint reaches a user
/// who only sees the message.
fn retry_hint(retry_after: Option<Duration>) -> String {
    retry_after.map(|wait| format!(" (retry after {wait:?})")).unwrap_or_default()
}

/// The address without its `http://` scheme, as users type it.
pub(crate) fn display_address(address: &str) -> String {
    address.strip_prefix("http://").unwrap_or(address).trim_end_matches('/').to_string()
}

/// tonic's own deadline (the `grpc-timeout` header it enforces) ends the call with
/// CANCELLED "Timeout expired"; a server that gives up answers DEADLINE_EXCEEDED.
fn is_client_timeout(status: &tonic::Status) -> bool {
    status.code() == Code::DeadlineExceeded
        || (status.code() == Code::Cancelled && status.message().contains("Timeout expired"))
}

/// The reason of a failure below gRPC (connect refused, connection reset, TLS), in
/// a few lowercase words; None when the status came from the server itself.
pub(crate) fn transport_failure(status: &tonic::Status) -> Option<String> {
    // hyper cancels requests still queued on a connection that closes (the server
    // died): CANCELLED "operation was canceled", though the request never left.
    if status.code() == Code::Cancelled && status.message().starts_with("operation was canceled") {
        return Some("connection closed".to_string());
    }
    if status.code() != Code::Unavailable && status.code() != Code::Unknown && status.code() != Code::Internal {
        return None;
    }
    // A server's UNAVAILABLE (e.g. the model is still loading) has no source.
    let mut source: Option<&(dyn StdError + 'static)> = status.source();
    let mut innermost: Option<String> = None;
    let mut found_transport = false;
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Some(io_reason(io));
        }
        if error.is::<tonic::transport::Error>() || error.is::<tonic::ConnectError>() {
            found_transport = true;
        }
        innermost = Some(error.to_string());
        source = error.source();
    }
    if found_transport || is_transport_message(status.message()) {
        return Some(innermost.unwrap_or_else(|| status.message().to_string()));
    }
    None
}

/// tonic flattens some connection failures into the status message only.
fn is_transport_message(message: &str) -> bool {
    ["tcp connect error", "transport error", "connection error", "error trying to connect", "h2 protocol error"]
        .iter()
        .any(|needle| message.contains(needle))
}

/// "connection refused" rather than "Connection refused (os error 111)".
fn io_reason(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::ConnectionRefused => "connection refused".to_string(),
        ErrorKind::ConnectionReset => "connection reset".to_string(),
        ErrorKind::ConnectionAborted => "connection aborted".to_string(),
        ErrorKind::TimedOut => "connect timed out".to_string(),
        ErrorKind::NotFound => "host not found".to_string(),
        _ => {
            let text = error.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text);
            // "Host is unreachable" -> "host is unreachable", but names inside
            // the message (e.g. rustls's UnknownIssuer) keep their case.
            let mut chars = text.chars();
            chars.next().map(|first| first.to_lowercase().chain(chars).collect()).unwrap_or_default()
        }
    }
}

/// The canonical upper-case name of a gRPC code, as grpcurl and the spec print it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_status_keeps_its_code_and_message() {
        let status = tonic::Status::invalid_argument("inputs[0]: empty text");
        let error = Error::from_status(status, "http://127.0.0.1:5", None);
        assert_eq!(error.to_string(), "INVALID_ARGUMENT: inputs[0]: empty text");
        assert_eq!(error.code(), Code::InvalidArgument);
    }

    #[test]
    fn a_refusal_keeps_its_retry_hint() {
        let mut status = tonic::Status::resource_exhausted("queue full");
        embedwire_proto::transport::set_retry_pushback(&mut status, Duration::from_millis(120));
        let error = Error::from_status(status, "http://h:1", None);
        assert_eq!(error.retry_after(), Some(Duration::from_millis(120)));
        assert_eq!(error.to_string(), "RESOURCE_EXHAUSTED: queue full (retry after 120ms)");
        let plain = Error::from_status(tonic::Status::resource_exhausted("too big"), "http://h:1", None);
        assert_eq!(plain.retry_after(), None);
        assert_eq!(plain.to_string(), "RESOURCE_EXHAUSTED: too big");
    }

    #[test]
    fn a_server_unavailable_without_source_is_the_servers_answer() {
        let status = tonic::Status::unavailable("model is loading");
        let error = Error::from_status(status, "http://h:1", None);
        assert!(matches!(error, Error::Status { code: Code::Unavailable, .. }), "{error:?}");
        assert!(error.is_unavailable());
    }

    #[test]
    fn an_io_error_under_the_status_is_a_transport_failure() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let status = tonic::Status::from_error(Box::new(tonic::ConnectError(Box::new(io))));
        // tonic keeps only the message of a ConnectError; either way it is a transport failure.
        let error = Error::from_status(status, "http://127.0.0.1:1", None);
        assert!(matches!(error, Error::Unreachable { .. }), "{error:?}");
        assert!(error.to_string().starts_with("cannot reach 127.0.0.1:1: "), "{error}");
    }

    #[test]
    fn a_request_cancelled_by_a_closing_connection_is_a_transport_failure() {
        let status = tonic::Status::cancelled("operation was canceled: connection closed");
        let error = Error::from_status(status, "http://h:1", None);
        assert_eq!(error.to_string(), "cannot reach h:1: connection closed");
    }

    #[test]
    fn tonics_timeout_is_a_deadline() {
        let status = tonic::Status::cancelled("Timeout expired");
        let error = Error::from_status(status, "http://h:1", Some(Duration::from_millis(5)));
        assert!(matches!(error, Error::DeadlineExceeded { .. }), "{error:?}");
    }
}
