//! Compiles `proto/` with protox (pure Rust), so a fresh machine needs no
//! system `protoc`, and writes the descriptor set that gRPC reflection serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/tenure/v1/lease.proto",
        "proto/tenure/v1/error_reason.proto",
        "proto/tenure/v1/election.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("tenure_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
