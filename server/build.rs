//! Generates the gRPC code from `proto/cinder/v1/cinder.proto` with the `protoc` that the
//! `protoc-bin-vendored` crate ships (no system protobuf compiler needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/cinder/v1/cinder.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&["proto/cinder/v1/cinder.proto"], &["proto"])?;
    Ok(())
}
