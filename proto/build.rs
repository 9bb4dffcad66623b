//! Compiles `embedwire/v1/*.proto` into Rust (prost messages, tonic clients and
//! servers) and writes the file descriptor set that server reflection serves; then
//! the vendored `weaviate/v1/*.proto` into a tonic client only (the `--store weaviate`
//! engine talks to Weaviate with it). protoc comes from the protoc-bin-vendored crate,
//! so no system protoc is needed.

use std::path::{Path, PathBuf};

fn protos_in(dir: &Path) -> Result<Vec<PathBuf>, std::io::Error> {
    let mut protos: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "proto"))
        .collect();
    protos.sort();
    for proto in &protos {
        println!("cargo:rerun-if-changed={}", proto.display());
    }
    println!("cargo:rerun-if-changed={}", dir.display());
    Ok(protos)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let well_known = protoc_bin_vendored::include_path()?;

    let protos = protos_in(&proto_root.join("embedwire/v1"))?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Keep `bytes` fields as `bytes::Bytes` so responses are handed to the
    // transport without another copy.
    config.bytes(["."]);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("embedwire_descriptor.bin"))
        .compile_with_config(config, &protos, &[proto_root.clone()])?;

    // Weaviate's protos import each other as "v1/base.proto", so their root is weaviate/.
    let weaviate_root = proto_root.join("weaviate");
    let weaviate_protos = protos_in(&weaviate_root.join("v1"))?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Vectors go out as `vector_bytes` without a copy.
    config.bytes(["."]);
    tonic_prost_build::configure().build_server(false).compile_with_config(
        config,
        &weaviate_protos,
        &[weaviate_root, well_known],
    )?;
    Ok(())
}
