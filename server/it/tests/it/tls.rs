//! TLS with a CA the test makes itself (rcgen): gRPC (tonic), HTTP/1.1 and HTTP/2 JSON
//! (curl) and the Python client all connect with the CA; plaintext is refused.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{InProcessServer, PSEUDO, TempDir, venv_python};
use embedwire_proto::v1::EmbedRequest;
use embedwire_proto::v1::embed_service_client::EmbedServiceClient;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

/// A CA, and a certificate it signed for localhost and 127.0.0.1, as PEM files.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    _dir: TempDir,
}

fn make_pki() -> Pki {
    let dir = TempDir::new("pki");
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "embedwire test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    let write = |name: &str, text: String| {
        let path = dir.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", ca_cert.pem()),
        cert: write("server.pem", server_cert.pem()),
        key: write("server.key", server_key.serialize_pem()),
        _dir: dir,
    }
}

async fn tls_channel(port: u16, ca: &Path) -> Result<Channel, tonic::transport::Error> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
        .domain_name("localhost");
    Channel::from_shared(format!("https://localhost:{port}")).unwrap().tls_config(tls)?.connect().await
}

fn curl(args: &[&str]) -> (bool, String) {
    let output =
        std::process::Command::new("curl").args(["-sS", "--max-time", "10"]).args(args).output().expect("curl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_for_grpc_http1_http2_and_python_with_plaintext_refused() {
    let pki = make_pki();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let args = [PSEUDO, &["--tls-cert", pki.cert.to_str().unwrap(), "--tls-key", pki.key.to_str().unwrap()]].concat();
    let _server = InProcessServer::start_on(listener, &args);

    // gRPC over TLS, once the backend is up.
    let deadline = Instant::now() + Duration::from_secs(30);
    let reply = loop {
        let attempt = async {
            let mut client = EmbedServiceClient::new(tls_channel(port, &pki.ca).await.ok()?);
            client.embed(EmbedRequest { inputs: vec!["over tls".into()], ..Default::default() }).await.ok()
        };
        if let Some(reply) = attempt.await {
            break reply.into_inner();
        }
        assert!(Instant::now() < deadline, "no TLS answer within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((reply.count, reply.dim), (1, 384));

    // Plaintext gRPC on the TLS port gets no answer.
    let plaintext = async {
        let channel = Channel::from_shared(format!("http://127.0.0.1:{port}")).ok()?.connect().await.ok()?;
        EmbedServiceClient::new(channel)
            .embed(EmbedRequest { inputs: vec!["x".into()], ..Default::default() })
            .await
            .ok()
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), plaintext).await.ok().flatten().is_none(),
        "plaintext must fail"
    );

    // HTTP/1.1 and HTTP/2 JSON over TLS (curl verifies against the test CA).
    let url = format!("https://localhost:{port}/healthz");
    let ca = pki.ca.to_str().unwrap();
    for version in ["--http1.1", "--http2"] {
        // Embeddings answer before the index is open; `model_loaded` waits for both
        // (seen false here right after the first embed on a loaded machine).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (ok, body) = curl(&[version, "--cacert", ca, &url]);
            assert!(ok, "{version}: {body}");
            if body.contains("\"model_loaded\":true") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{version}: {body}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let (ok, body) = curl(&[&url]);
    assert!(!ok, "without the CA the certificate is not trusted: {body}");
    let (ok, _) = curl(&[&format!("http://127.0.0.1:{port}/healthz")]);
    assert!(!ok, "plaintext HTTP is refused on a TLS port");

    // The Python client with the CA as root certificate.
    let script = "import sys, embedwire\n\
        ca = open(sys.argv[2], 'rb').read()\n\
        with embedwire.Client(sys.argv[1], root_certificates=ca) as client:\n    print(client.embed(['over tls']).shape)\n";
    let output = std::process::Command::new(venv_python())
        .args(["-c", script, &format!("localhost:{port}"), ca])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && printed.trim() == "(1, 384)",
        "python: {printed} {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
