//! The server's one error type. Domain code returns it; `wire` maps it once to a
//! gRPC status (and the HTTP layer maps the same variants once to HTTP).

/// Everything that can go wrong serving a request or starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; the message starts with the culprit field
    /// (`inputs[3]: ...`, `dtype: ...`).
    #[error("{0}")]
    InvalidArgument(String),
    /// A limit on size was hit; sending less may work.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The server is overloaded now and did no work for the call; the same call
    /// should work after about `retry_after` (a hint, sent to the client as
    /// `grpc-retry-pushback-ms` / HTTP `Retry-After`, see
    /// `embedwire_proto::transport::RETRY_PUSHBACK_METADATA`).
    #[error("{reason}")]
    Overloaded { reason: String, retry_after: std::time::Duration },
    /// A count over a limit the server will never raise for this call (more texts
    /// than a Rerank call may carry): send less, not later.
    #[error("{0}")]
    OutOfRange(String),
    /// The server cannot answer now: the model is loading, or no upstream is reachable.
    #[error("{0}")]
    Unavailable(String),
    /// The caller went away or its deadline passed before the work ran.
    #[error("request cancelled before it ran")]
    Cancelled,
    /// The model failed on a batch: a bug or a broken model file, not the caller's fault.
    #[error("model failure: {0}")]
    Model(String),
    /// The server is configured in a way that cannot work.
    #[error("configuration: {0}")]
    Config(String),
    /// The named thing (a job, a document) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What the request creates exists already (a collection of that name).
    #[error("{0}")]
    AlreadyExists(String),
    /// The request cannot work on this server as configured (e.g. rerank without a
    /// cross-encoder).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The durable store failed: disk full, I/O error, corruption.
    #[error("storage: {0}")]
    Storage(String),
    /// An upstream server answered with an error that is not one of the above.
    #[error("upstream: {0}")]
    Upstream(String),
}

impl Error {
    /// A bad request field, with a message that says what is wrong with it.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidArgument(format!("{}: {}", field.into(), message.into()))
    }
}

/// Shorthand for results of the server's own operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
