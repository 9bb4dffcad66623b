//! Keeps gateway-http/openapi.json equal to the document generated from the routes.
//! `EMBEDWIRE_UPDATE_OPENAPI=1 cargo test --release -p embedwire-gateway-http --test it openapi`
//! rewrites it after a route changes.

#[test]
fn openapi_json_in_the_repo_is_fresh() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi.json");
    let generated = embedwire_gateway_http::openapi_json();
    if std::env::var_os("EMBEDWIRE_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(kept == generated, "{} is stale: rerun with EMBEDWIRE_UPDATE_OPENAPI=1", path.display());
}
