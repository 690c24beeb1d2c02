//! The `tallyd` that users run has no way to inject faults: the flag that
//! makes a node lose acknowledged adds lives only in the test-only
//! `tallyd-faults` binary (package `tally-tests`).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use tally_tests::bin;

fn tallyd(args: &[&str]) -> (bool, String) {
    let out = Command::new(bin("tallyd").unwrap())
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn tallyd_run_has_no_fault_injection_flag() {
    let (ok, help) = tallyd(&["run", "--help"]);
    assert!(ok, "{help}");
    assert!(help.contains("--node"), "{help}");
    for word in ["drop-every", "unsafe", "fault injection"] {
        assert!(!help.to_lowercase().contains(word), "{word}: {help}");
    }
    // Not merely hidden: refused before the node even reads its config.
    let (ok, err) = tallyd(&[
        "run",
        "--config",
        "/nonexistent/cluster.toml",
        "--node",
        "n1",
        "--unsafe-drop-every",
        "5",
    ]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("unexpected argument '--unsafe-drop-every'"),
        "{err}"
    );
}
