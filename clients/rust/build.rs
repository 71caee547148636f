//! Generates the tonic client from `../../proto` at build time with protox
//! (pure Rust, so no system `protoc` is needed). Nothing generated is checked
//! in: the stubs are always those of the proto being built against.
//!
//! Besides the stubs it writes `error_reason_numbers.rs`: the numbers of every
//! value of `tenure.v1.ErrorReason`, read from the same descriptors, so
//! `Reason::all()` lists every reason of the proto without a hand-kept list.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", proto.display());
    let fds = protox::compile(
        [
            "tenure/v1/lease.proto",
            "tenure/v1/error_reason.proto",
            "tenure/v1/election.proto",
        ],
        [&proto],
    )?;

    let numbers: Vec<String> = fds
        .file
        .iter()
        .filter(|f| f.package() == "tenure.v1")
        .flat_map(|f| &f.enum_type)
        .filter(|e| e.name() == "ErrorReason")
        .flat_map(|e| &e.value)
        .map(|v| v.number().to_string())
        .collect();
    if numbers.is_empty() {
        return Err("tenure.v1.ErrorReason not found in proto/".into());
    }
    std::fs::write(
        out.join("error_reason_numbers.rs"),
        format!("[{}]\n", numbers.join(", ")),
    )?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        // New reasons are added to the proto over time: matching on them
        // must keep a wildcard arm.
        .enum_attribute("tenure.v1.ErrorReason", "#[non_exhaustive]")
        .compile_fds(fds)?;
    Ok(())
}
