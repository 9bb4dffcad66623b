//! From a configured address to a tonic `Channel`: the URI (a bare `host:port` is
//! accepted), TLS with a CA file or the system roots, connection settings, and the
//! interceptor that puts the API key on every call.

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::Endpoint;

use crate::config::ClientConfig;
use crate::error::{Error, Result};

/// Interval of HTTP/2 pings, so a server that vanished without closing the
/// connection (a pulled cable, a killed VM) is noticed on an idle channel too.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a ping may go unanswered before the connection counts as dead.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// `address` with a scheme: `host:port` becomes `http://host:port`, or `https://`
/// when TLS is configured.
pub(crate) fn normalize_address(address: &str, tls: bool) -> Result<String> {
    let address = address.trim();
    if address.is_empty() {
        return Err(Error::InvalidAddress { address: address.to_string(), reason: "empty".to_string() });
    }
    let with_scheme = if address.contains("://") {
        address.to_string()
    } else {
        format!("{}://{address}", if tls { "https" } else { "http" })
    };
    if tls && with_scheme.starts_with("http://") {
        return Err(Error::InvalidAddress {
            address: address.to_string(),
            reason: "a CA file is set, so the address must be https://".to_string(),
        });
    }
    if !with_scheme.starts_with("http://") && !with_scheme.starts_with("https://") {
        return Err(Error::InvalidAddress {
            address: address.to_string(),
            reason: "the scheme must be http:// or https://".to_string(),
        });
    }
    Ok(with_scheme)
}

/// The endpoint for one (normalized) address, TLS included when it is https.
pub(crate) fn endpoint(address: &str, config: &ClientConfig) -> Result<Endpoint> {
    let endpoint = Endpoint::from_shared(address.to_string())
        .map_err(|error| Error::InvalidAddress { address: address.to_string(), reason: error.to_string() })?
        .tcp_nodelay(true)
        .connect_timeout(config.connect_timeout)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .max_frame_size(embedwire_proto::transport::MAX_FRAME_SIZE);
    if address.starts_with("https://") { with_tls(endpoint, address, config) } else { Ok(endpoint) }
}

#[cfg(feature = "tls")]
fn with_tls(endpoint: Endpoint, address: &str, config: &ClientConfig) -> Result<Endpoint> {
    use tonic::transport::{Certificate, ClientTlsConfig};

    let mut tls = ClientTlsConfig::new();
    tls = match &config.ca_file {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|source| Error::CaFile { path: path.clone(), source })?;
            tls.ca_certificate(Certificate::from_pem(pem))
        }
        None => tls.with_native_roots(),
    };
    if let Some(domain) = &config.tls_domain {
        tls = tls.domain_name(domain.clone());
    }
    endpoint.tls_config(tls).map_err(|error| Error::Tls { address: address.to_string(), reason: error.to_string() })
}

#[cfg(not(feature = "tls"))]
fn with_tls(_endpoint: Endpoint, address: &str, _config: &ClientConfig) -> Result<Endpoint> {
    Err(Error::Tls { address: address.to_string(), reason: "built without the `tls` feature".to_string() })
}

/// Adds `authorization: Bearer KEY` to every request when a key is configured.
#[derive(Clone, Default)]
pub(crate) struct Authorization(Option<MetadataValue<Ascii>>);

impl Authorization {
    pub(crate) fn new(api_key: Option<&str>) -> Result<Self> {
        let Some(key) = api_key else { return Ok(Authorization(None)) };
        let mut value: MetadataValue<Ascii> = format!("Bearer {key}").parse().map_err(|_| Error::InvalidApiKey)?;
        // Keeps the key out of HPACK's dynamic table and of debug output.
        value.set_sensitive(true);
        Ok(Authorization(Some(value)))
    }
}

impl Interceptor for Authorization {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_addresses_get_a_scheme() {
        assert_eq!(normalize_address("127.0.0.1:50051", false).unwrap(), "http://127.0.0.1:50051");
        assert_eq!(normalize_address("h:1", true).unwrap(), "https://h:1");
        assert_eq!(normalize_address("https://h:1", false).unwrap(), "https://h:1");
        assert!(normalize_address("http://h:1", true).is_err(), "a CA file with plain http is a mistake");
        assert!(normalize_address("ftp://h:1", false).is_err());
        assert!(normalize_address(" ", false).is_err());
    }

    #[cfg(feature = "tls")]
    #[test]
    fn https_endpoints_take_the_ca_file_or_the_system_roots() {
        let missing = ClientConfig::new(["h:1"]).with_ca_file("/nonexistent/ca.pem");
        let error = endpoint("https://h:1", &missing).unwrap_err();
        assert!(error.to_string().starts_with("cannot read CA file /nonexistent/ca.pem: "), "{error}");

        let dir = std::env::temp_dir().join(format!("embedwire-client-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n").unwrap();
        assert!(endpoint("https://h:1", &ClientConfig::new(["h:1"]).with_ca_file(&ca)).is_ok());
        assert!(endpoint("https://h:1", &ClientConfig::new(["h:1"])).is_ok(), "system roots");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_api_key_goes_into_the_authorization_header() {
        let mut auth = Authorization::new(Some("k3y")).unwrap();
        let request = auth.call(tonic::Request::new(())).unwrap();
        assert_eq!(request.metadata().get("authorization").unwrap(), "Bearer k3y");
        let mut none = Authorization::new(None).unwrap();
        assert!(none.call(tonic::Request::new(())).unwrap().metadata().get("authorization").is_none());
        assert!(matches!(Authorization::new(Some("bad\nkey")), Err(Error::InvalidApiKey)));
    }
}
