//! Compiles `proto/*.proto` with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/node.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
