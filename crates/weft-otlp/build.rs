//! Compiles the vendored OTLP protos (see `proto/README.md`) with a vendored `protoc`.

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc is available");
    let mut cfg = prost_build::Config::new();
    cfg.protoc_executable(protoc);
    cfg.bytes(["."]);
    cfg.include_file("otlp.rs");
    let files = [
        "opentelemetry/proto/common/v1/common.proto",
        "opentelemetry/proto/resource/v1/resource.proto",
        "opentelemetry/proto/trace/v1/trace.proto",
        "opentelemetry/proto/collector/trace/v1/trace_service.proto",
    ];
    let paths: Vec<_> = files.iter().map(|f| root.join(f)).collect();
    for p in &paths {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    cfg.compile_protos(&paths, &[root])
        .expect("vendored OTLP protos compile");
}
