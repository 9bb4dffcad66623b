//! One HTTP/1.1 keep-alive connection per load worker, its bytes counted ([`crate::wire_count`]). A pool that opens
//! connections on demand would make the connection count depend on timing; here it is exactly one per holder.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::{Serialize, de::DeserializeOwned};
use tokio::task::JoinHandle;

use crate::wire_count::{ByteCounters, connect_counted};

/// A complete answer: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl HttpResponse {
    /// The body parsed as JSON, after checking for a 2xx status.
    pub fn json<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        self.ensure_success()?;
        serde_json::from_slice(&self.body).with_context(|| format!("parsing the answer: {}", self.preview()))
    }

    /// An error naming the status and the start of the body unless it is 2xx.
    pub fn ensure_success(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.status.is_success(), "HTTP {}: {}", self.status, self.preview());
        Ok(())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    fn preview(&self) -> String {
        String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned()
    }
}

/// One keep-alive connection to one server, reopened if the server closed it between requests (idle timeouts do).
pub struct HttpConnection {
    address: SocketAddr,
    host: HeaderValue,
    counters: Arc<ByteCounters>,
    sender: SendRequest<Full<Bytes>>,
    /// Drives the connection; aborted when the connection is dropped. An error ends the
    /// connection; the next send sees it closed and reopens.
    driver: JoinHandle<Result<(), hyper::Error>>,
}

impl Drop for HttpConnection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl HttpConnection {
    /// A connection whose bytes add to `counters`.
    pub async fn open(address: SocketAddr, counters: Arc<ByteCounters>) -> anyhow::Result<Self> {
        let stream =
            connect_counted(address, counters.clone()).await.with_context(|| format!("connecting to {address}"))?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.context("HTTP/1.1 handshake")?;
        let driver = tokio::spawn(connection);
        let host = HeaderValue::from_str(&address.to_string())?;
        Ok(HttpConnection { address, host, counters, sender, driver })
    }

    /// Sends one request and reads the whole answer. `accept` defaults to JSON.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<(Bytes, &'static str)>,
        accept: Option<&'static str>,
    ) -> anyhow::Result<HttpResponse> {
        if self.sender.is_closed() || self.sender.ready().await.is_err() {
            // The old connection's driver is aborted when it is dropped here.
            *self = HttpConnection::open(self.address, self.counters.clone()).await?;
        }
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.host.clone())
            .header(header::ACCEPT, accept.unwrap_or("application/json"));
        if let Some((_, content_type)) = body {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let payload = body.map_or_else(Bytes::new, |(bytes, _)| bytes);
        let response = self
            .sender
            .send_request(request.body(Full::new(payload))?)
            .await
            .with_context(|| format!("HTTP request to {}{path}", self.address))?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.context("reading the HTTP answer")?.to_bytes();
        Ok(HttpResponse { status: parts.status, headers: parts.headers, body })
    }

    pub async fn post_json<T: Serialize>(&mut self, path: &str, value: &T) -> anyhow::Result<HttpResponse> {
        let body = Bytes::from(serde_json::to_vec(value)?);
        self.send(Method::POST, path, Some((body, "application/json")), None).await
    }

    pub async fn get(&mut self, path: &str) -> anyhow::Result<HttpResponse> {
        self.send(Method::GET, path, None, None).await
    }
}
