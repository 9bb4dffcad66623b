//! [`Client`]: the handle every call goes through. Cheap to clone (one `Arc`), so
//! tasks share one set of connections.

use std::sync::Arc;

use futures::future::join_all;
use tonic::transport::Channel;

use crate::config::ClientConfig;
use crate::error::{Error, Result, display_address};
use crate::policy::{CallStats, Caller};
use crate::pool::{Backend, Pool};
use crate::transport::{Authorization, endpoint, normalize_address};

/// A client of one or more embedwire servers.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
    /// The collection its document calls act on (empty: the server's default).
    pub(crate) collection: Arc<str>,
}

pub(crate) struct Inner {
    pub caller: Caller,
}

impl Client {
    /// Connects to `addresses` with the default settings (see [`ClientConfig`]).
    pub async fn connect<I, S>(addresses: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientConfig::new(addresses).connect().await
    }

    /// See [`ClientConfig::connect`].
    pub(crate) async fn connect_with(config: ClientConfig) -> Result<Client> {
        // Every setting is checked before anything is dialed.
        Authorization::new(config.api_key.as_deref())?;
        let prepared = prepare(&config)?;
        let dials = prepared.iter().map(|(address, endpoint)| async move {
            match endpoint.connect().await {
                Ok(channel) => (channel, None),
                Err(error) => {
                    let status = tonic::Status::from_error(Box::new(error));
                    (endpoint.connect_lazy(), Some(Error::from_status(status, address, None)))
                }
            }
        });
        let dialed = join_all(dials).await;
        if dialed.iter().all(|(_, error)| error.is_some()) {
            let (_, error) = dialed.into_iter().next().expect("at least one address");
            return Err(error.expect("every dial failed"));
        }
        let unreachable: Vec<bool> = dialed.iter().map(|(_, error)| error.is_some()).collect();
        let channels = dialed.into_iter().map(|(channel, _)| channel).collect();
        let client = build(&config, prepared, channels)?;
        let pool = &client.inner.caller.pool;
        for (backend, down) in pool.backends().iter().zip(unreachable) {
            if down {
                pool.mark_down(backend);
            }
        }
        Ok(client)
    }

    /// See [`ClientConfig::connect_lazy`].
    pub(crate) fn connect_lazy_with(config: ClientConfig) -> Result<Client> {
        let prepared = prepare(&config)?;
        let channels = prepared.iter().map(|(_, endpoint)| endpoint.connect_lazy()).collect();
        build(&config, prepared, channels)
    }

    /// The servers' addresses, as the client uses them (with their scheme).
    pub fn addresses(&self) -> Vec<String> {
        self.inner.caller.pool.backends().iter().map(|backend| backend.address.clone()).collect()
    }

    /// The same client (its connections shared) acting on collection `name`: ingest,
    /// jobs, documents, search and statistics go there. `""` or `"default"` is the
    /// server's default collection, the one a client acts on unless told.
    pub fn collection(&self, name: impl AsRef<str>) -> Client {
        Client { inner: self.inner.clone(), collection: Arc::from(name.as_ref()) }
    }

    /// The collection this client acts on (empty: the default one).
    pub fn collection_name(&self) -> &str {
        &self.collection
    }

    /// What the retry and hedging policy has done so far.
    pub fn stats(&self) -> CallStats {
        self.inner.caller.stats()
    }
}

/// Normalized addresses and their endpoints, checked before anything is dialed.
fn prepare(config: &ClientConfig) -> Result<Vec<(String, tonic::transport::Endpoint)>> {
    if config.addresses.is_empty() {
        return Err(Error::NoAddress);
    }
    let tls = config.ca_file.is_some();
    config
        .addresses
        .iter()
        .map(|address| {
            let address = normalize_address(address, tls)?;
            let endpoint = endpoint(&address, config)?;
            Ok((address, endpoint))
        })
        .collect()
}

fn build(
    config: &ClientConfig,
    prepared: Vec<(String, tonic::transport::Endpoint)>,
    channels: Vec<Channel>,
) -> Result<Client> {
    let auth = Authorization::new(config.api_key.as_deref())?;
    let backends = prepared
        .into_iter()
        .zip(channels)
        .map(|((address, _), channel)| Backend::new(address, channel, auth.clone(), config.max_message_bytes))
        .collect();
    let pool = Pool::new(backends, config.cool_down);
    let caller = Caller::new(pool, config.retry.clone(), config.timeout, config.hedge_after);
    Ok(Client { inner: Arc::new(Inner { caller }), collection: Arc::from("") })
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addresses: Vec<String> = self.addresses().iter().map(|a| display_address(a)).collect();
        f.debug_struct("Client").field("addresses", &addresses).finish()
    }
}
