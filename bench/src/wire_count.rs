//! Bytes on the wire: a TCP stream that counts what crosses it, so "bytes per response" includes HTTP/1.1 headers and
//! chunking, HTTP/2 and gRPC framing; and the gRPC channel and codec that send a request as bytes encoded once.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic},
};

use bytes::{BufMut, Bytes};
use embedwire_proto::transport;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::io::{InspectReader, InspectWriter};
use tonic::{
    codec::{Codec, EncodeBuf, Encoder},
    transport::{Channel, Endpoint},
};

/// Byte totals of one or more connections.
#[derive(Debug, Default)]
pub struct ByteCounters {
    received: atomic::AtomicU64,
    sent: atomic::AtomicU64,
}

impl ByteCounters {
    /// Fresh counters, shared by the connections that should add up together.
    pub fn new() -> Arc<Self> {
        Arc::new(ByteCounters::default())
    }

    /// (received, sent) so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.received.load(atomic::Ordering::Relaxed), self.sent.load(atomic::Ordering::Relaxed))
    }
}

/// A TCP connection to `address` whose reads and writes add to `counters`; Nagle off (small, latency-bound requests).
pub async fn connect_counted(
    address: SocketAddr,
    counters: Arc<ByteCounters>,
) -> std::io::Result<impl AsyncRead + AsyncWrite + Send + Unpin + 'static> {
    let stream = tokio::net::TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    let sent = counters.clone();
    let writes = InspectWriter::new(stream, move |bytes: &[u8]| {
        sent.sent.fetch_add(bytes.len() as u64, atomic::Ordering::Relaxed);
    });
    Ok(InspectReader::new(writes, move |bytes: &[u8]| {
        counters.received.fetch_add(bytes.len() as u64, atomic::Ordering::Relaxed);
    }))
}

/// A gRPC channel whose bytes add to `counters`, with the Rust client's frame size
/// (embedwire_proto::transport): a 393 KB answer comes as one DATA frame, not 25.
pub async fn grpc_channel(address: SocketAddr, counters: Arc<ByteCounters>) -> anyhow::Result<Channel> {
    let connector = tower::service_fn(move |_: http::Uri| {
        let counters = counters.clone();
        async move { connect_counted(address, counters).await.map(hyper_util::rt::TokioIo::new) }
    });
    let endpoint = Endpoint::from_shared(format!("http://{address}"))?.max_frame_size(transport::MAX_FRAME_SIZE);
    Ok(endpoint.connect_with_connector(connector).await?)
}

/// A gRPC codec whose request goes out as the bytes it was encoded to once (as an HTTP client sends one serialized
/// body), the answer decoded as the generated client decodes it: only the answers then cost the client differently.
#[derive(Default)]
pub struct PreEncoded<M>(std::marker::PhantomData<M>);

impl<M: prost::Message + Default + Send + 'static> Codec for PreEncoded<M> {
    type Encode = Bytes;
    type Decode = M;
    type Encoder = BytesEncoder;
    type Decoder = tonic_prost::ProstDecoder<M>;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

/// [`PreEncoded`]'s encoder: copies the bytes into the frame.
pub struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}
