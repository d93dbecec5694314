//! The `weft` binary as a user first meets it: it names its version, and refuses an unknown
//! flag with a message that names the flag and a failing exit status. (`make test` also runs
//! the end-to-end suite against this same build of the binary: `cargo test` builds it.)

use std::process::Command;

fn weft(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .output()
        .expect("the weft binary runs")
}

#[test]
fn the_binary_names_its_version() {
    let out = weft(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim(), format!("weft {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn an_unknown_flag_is_refused_by_name() {
    let out = weft(&["--no-such-flag"]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
}
