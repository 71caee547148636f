//! Generates the tonic client from `../../proto` at build time with protox
//! (pure Rust, so no system `protoc` is needed). Nothing generated is checked
//! in: the stubs are always those of the proto being built against.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile(
        ["tenure/v1/lease.proto", "tenure/v1/error_reason.proto"],
        [&proto],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
