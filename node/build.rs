//! Names the build: `TALLY_BUILD` is the package version and, in a git
//! checkout, the commit (`0.1.0+1a2b3c4d5e6f`), which nodes announce to
//! their peers and `tally status` shows. `TALLY_BUILD` set when building
//! names it instead.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    // A packager may name the build itself.
    let build = match (
        std::env::var("TALLY_BUILD"),
        git(&["rev-parse", "--short=12", "HEAD"]),
    ) {
        (Ok(named), _) if !named.is_empty() => named,
        (_, Some(commit)) => format!("{version}+{commit}"),
        _ => version,
    };
    println!("cargo:rustc-env=TALLY_BUILD={build}");
    // Named again after every commit and checkout.
    let watched = [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["rev-parse", "--git-path", "packed-refs"]),
        git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])),
    ];
    for path in watched.into_iter().flatten() {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-env-changed=TALLY_BUILD");
}
