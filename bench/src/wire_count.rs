//! Bytes on the wire: a TCP stream that counts what crosses it, so that "bytes per
//! response" is what really travelled (HTTP/1.1 headers and chunking, HTTP/2 and
//! gRPC framing included), not the size of a body the client happened to see.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Byte totals of one or more connections.
#[derive(Debug, Default)]
pub struct ByteCounters {
    /// Bytes the client received (responses).
    received: AtomicU64,
    /// Bytes the client sent (requests).
    sent: AtomicU64,
}

impl ByteCounters {
    /// Fresh counters, shared by the connections that should add up together.
    pub fn new() -> Arc<Self> {
        Arc::new(ByteCounters::default())
    }

    /// (received, sent) so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.received.load(Ordering::Relaxed), self.sent.load(Ordering::Relaxed))
    }
}

/// A TCP stream whose reads and writes are added to shared counters.
pub struct CountingStream {
    inner: TcpStream,
    counters: Arc<ByteCounters>,
}

impl CountingStream {
    /// Connects to `address` with Nagle off (requests are small and latency-bound).
    pub async fn connect(address: SocketAddr, counters: Arc<ByteCounters>) -> io::Result<Self> {
        let inner = TcpStream::connect(address).await?;
        inner.set_nodelay(true)?;
        Ok(CountingStream { inner, counters })
    }
}

impl AsyncRead for CountingStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.counters.received.fetch_add(read, Ordering::Relaxed);
        poll
    }
}

impl AsyncWrite for CountingStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = &poll {
            self.counters.sent.fetch_add(*written as u64, Ordering::Relaxed);
        }
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(written)) = &poll {
            self.counters.sent.fetch_add(*written as u64, Ordering::Relaxed);
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[tokio::test]
    async fn counts_both_directions() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 5];
            socket.read_exact(&mut buf).await.unwrap();
            socket.write_all(b"0123456789").await.unwrap();
        });
        let counters = ByteCounters::new();
        let mut stream = CountingStream::connect(address, counters.clone()).await.unwrap();
        stream.write_all(b"hello").await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        echo.await.unwrap();
        assert_eq!(answer, b"0123456789");
        assert_eq!(counters.totals(), (10, 5));
    }
}
