//! API keys and TLS against the real server: the key travels as
//! `authorization: Bearer KEY` from the library and the CLI (flag and env), the
//! server's refusals keep their code and message, and a server with a certificate
//! from a CA the test makes is reached with `--ca-file`.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{TempDir, address, cli, cli_with_env, start, stdout_of};
use embedwire_client::{ClientConfig, Code, Document, Error, HealthStatus};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncBufReadExt, BufReader};

const KEY: &str = "client-test-key-0123456789";
const READ_ONLY_KEY: &str = "client-test-read-only-key-0123";

#[tokio::test]
async fn api_keys_go_on_every_call() {
    let server = start(&["--backend", "pseudo", "--api-keys", KEY, "--read-only-api-keys", READ_ONLY_KEY]).await;

    let anonymous = ClientConfig::new([address(&server)]).connect().await.unwrap();
    let error = anonymous.embed(["hello"]).await.unwrap_err();
    assert!(matches!(error, Error::Status { code: Code::Unauthenticated, .. }), "{error:?}");
    assert!(error.to_string().starts_with("UNAUTHENTICATED: "), "{error}");

    let keyed = ClientConfig::new([address(&server)]).with_api_key(KEY).connect().await.unwrap();
    assert_eq!(keyed.embed(["hello"]).await.unwrap().dim(), 384);
    assert_eq!(keyed.info().await.unwrap().dim, 384);
    let receipt = keyed.ingest(vec![Document::new("keyed document").with_id("k")]).await.unwrap();
    keyed.wait_job(&receipt.job.id, |_| {}).await.unwrap();

    let reader = ClientConfig::new([address(&server)]).with_api_key(READ_ONLY_KEY).connect().await.unwrap();
    assert_eq!(reader.search("keyed document", &Default::default()).await.unwrap()[0].document_id, "k");
    let error = reader.ingest(vec![Document::new("not allowed")]).await.unwrap_err();
    assert!(matches!(error, Error::Status { code: Code::PermissionDenied, .. }), "{error:?}");

    // The CLI: refused without a key (exit 4, the server's words), accepted with the
    // flag or its env twin.
    let flag = address(&server);
    let output = cli(&["--server", &flag, "embed", "hello"], None).await;
    assert_eq!(output.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("error: UNAUTHENTICATED: "), "{output:?}");
    assert_eq!(
        stdout_of(&cli(&["--server", &flag, "--api-key", KEY, "embed", "hello"], None).await).lines().count(),
        1
    );
    let output = cli_with_env(&["--server", &flag, "info"], None, &[("EMBEDWIRE_API_KEY", KEY)]).await;
    assert!(stdout_of(&output).contains("384"));
    server.stop().await.unwrap();
}

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
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "embedwire client test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    let write = |name: &str, text: String| {
        let path = dir.file(name);
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

/// A TLS server. embedwire-bench's `ServerProcess` polls health over plaintext, so
/// this starts the binary itself and polls health through the client under test.
struct TlsServer {
    _child: tokio::process::Child,
    address: String,
    _data: TempDir,
}

async fn start_tls(pki: &Pki) -> TlsServer {
    let data = TempDir::new("tls-data");
    let mut child = tokio::process::Command::new(common::server_binary())
        .args(["--listen", "127.0.0.1:0", "--backend", "pseudo", "--tls-cert"])
        .arg(&pki.cert)
        .arg("--tls-key")
        .arg(&pki.key)
        .arg("--data-dir")
        .arg(&data.0)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines.next_line().await.unwrap().expect("the server logs its address before exiting");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep reading the log so the pipe never fills.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let client = ClientConfig::new([address.clone()]).with_ca_file(&pki.ca).connect_lazy().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(client.health().await[0].status, Ok(HealthStatus::Serving)) {
        assert!(Instant::now() < deadline, "the TLS server at {address} did not serve in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    TlsServer { _child: child, address, _data: data }
}

#[tokio::test]
async fn tls_with_a_ca_file() {
    let pki = make_pki();
    let server = start_tls(&pki).await;

    // A bare host:port means https once a CA file is set.
    let client = ClientConfig::new([server.address.clone()]).with_ca_file(&pki.ca).connect().await.unwrap();
    assert_eq!(client.addresses(), [format!("https://{}", server.address)]);
    assert_eq!(client.embed(["over tls"]).await.unwrap().dim(), 384);

    // Without the CA the server's certificate is not trusted; plaintext is refused.
    let untrusted = ClientConfig::new([format!("https://{}", server.address)]).connect().await.unwrap_err();
    assert!(matches!(untrusted, Error::Unreachable { .. }), "{untrusted:?}");
    assert!(untrusted.to_string().contains("invalid peer certificate: UnknownIssuer"), "{untrusted}");
    let plaintext = ClientConfig::new([server.address.clone()]).connect_lazy().unwrap();
    assert!(plaintext.embed(["x"]).await.is_err());

    let ca = pki.ca.to_str().unwrap();
    let output = cli(&["--server", &server.address, "--ca-file", ca, "--json", "health"], None).await;
    assert_eq!(serde_json::from_str::<serde_json::Value>(&stdout_of(&output)).unwrap()[0]["status"], "SERVING");
    let embedded = stdout_of(&cli(&["--server", &server.address, "--ca-file", ca, "embed", "over tls"], None).await);
    assert_eq!(embedded.lines().count(), 1);
}
