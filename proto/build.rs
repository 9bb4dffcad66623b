//! Compiles `embedwire/v1/*.proto` into Rust (prost messages, tonic clients and
//! servers) and writes the file descriptor set that server reflection serves.
//! protoc comes from the protoc-bin-vendored crate, so no system protoc is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let protos: Vec<PathBuf> = std::fs::read_dir(proto_root.join("embedwire/v1"))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "proto"))
        .collect();
    for proto in &protos {
        println!("cargo:rerun-if-changed={}", proto.display());
    }
    println!("cargo:rerun-if-changed=embedwire/v1");

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Keep `bytes` fields as `bytes::Bytes` so responses are handed to the
    // transport without another copy.
    config.bytes(["."]);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("embedwire_descriptor.bin"))
        .compile_with_config(config, &protos, &[proto_root])?;
    Ok(())
}
