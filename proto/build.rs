//! Compiles every `proto/*.proto` with protox (pure Rust), so no system `protoc` is needed, and
//! generates prost messages plus tonic clients and servers for the services in them.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let mut files: Vec<String> = std::fs::read_dir("proto")?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(&files, ["proto"])?;
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
