//! One port for three protocols: gRPC, gRPC-web and HTTP/JSON. tonic-web's layer
//! answers any HTTP/1.1 request that is not gRPC-web with a bare 400, which would
//! shut out the JSON routes; this layer sends only gRPC-web requests (told apart by
//! their content type) through it and everything else straight to the routes.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Request, Response, header};
use tonic::body::Body;
use tonic_web::{GrpcWebLayer, GrpcWebService};
use tower::{Layer, Service, ServiceExt};

/// Wraps the routes so that gRPC-web requests are translated and the rest pass as is.
#[derive(Debug, Clone, Default)]
pub struct GrpcWebDispatchLayer;

impl<S: Clone> Layer<S> for GrpcWebDispatchLayer {
    type Service = GrpcWebDispatch<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcWebDispatch { web: GrpcWebLayer::new().layer(inner.clone()), plain: inner }
    }
}

/// The service [`GrpcWebDispatchLayer`] builds.
#[derive(Debug, Clone)]
pub struct GrpcWebDispatch<S> {
    web: GrpcWebService<S>,
    plain: S,
}

/// `application/grpc-web`, `application/grpc-web+proto`, `application/grpc-web-text`, ...
fn is_grpc_web<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc-web"))
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for GrpcWebDispatch<S>
where
    S: Service<Request<Body>, Response = Response<ResBody>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    ReqBody::Error: Into<tonic::codegen::StdError> + std::fmt::Display,
    ResBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    ResBody::Error: Into<tonic::codegen::StdError> + std::fmt::Display,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    /// Always ready: each call drives a clone of the chosen path to readiness itself
    /// (`oneshot`), since the two paths are separate service values.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if is_grpc_web(&request) {
            self.web.clone().oneshot(request).boxed()
        } else {
            self.plain.clone().oneshot(request.map(Body::new)).map(|result| result.map(|r| r.map(Body::new))).boxed()
        }
    }
}
