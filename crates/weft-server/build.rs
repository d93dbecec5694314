//! Embeds the web UI (`ui/dist`, built by `scripts/build_ui.sh`) into the binary, so nothing is
//! fetched at run time. Without a built UI the binary still builds and serves a page that says
//! how to build it.

use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dist = manifest.join("../../ui/dist");
    println!("cargo:rerun-if-changed={}", dist.display());
    println!("cargo:rerun-if-env-changed=WEFT_UI_DIST");
    let dist = std::env::var_os("WEFT_UI_DIST").map(PathBuf::from).unwrap_or(dist);
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files);
    }
    files.sort();
    let mut out = String::from(
        "/// The UI's files: (path under `ui/dist`, contents).\npub static FILES: &[(&str, &[u8])] = &[\n",
    );
    for (name, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        out.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("];\n");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    std::fs::write(out_dir.join("ui_files.rs"), out).expect("writing ui_files.rs");
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push((
                rel.to_string_lossy().replace('\\', "/"),
                p.canonicalize().unwrap_or(p.clone()),
            ));
        }
    }
}
