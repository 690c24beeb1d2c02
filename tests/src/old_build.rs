//! The build a rolling upgrade starts from: the commit where versioned
//! protocols began ([`UPGRADE_FROM`]), built from this repository's own
//! history into `target/upgrade-from/<commit>/bin/`, once (later runs
//! reuse it; a lock keeps two tests from building it at once).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The last commit before peer and client protocols were versioned: the
/// build every rolling-upgrade test starts its cluster on.
pub const UPGRADE_FROM: &str = "cf6f0e9461b9182ee9533ee06f87e2a4783bb1de";

/// The node binaries the tests run from the old build.
pub const BINARIES: [&str; 3] = ["tallyd", "tally", "tallyd-faults"];

/// The directory holding the old build's binaries (`tallyd`, `tally`,
/// `tallyd-faults`), building them first if they are not there yet. Only
/// the binaries are kept: the build's own target directory (gigabytes of
/// a debug build) is removed once they are copied out.
pub fn old_build() -> Result<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the tests package lives in the repository")?
        .to_path_buf();
    let root = target_dir(&repo).join("upgrade-from").join(UPGRADE_FROM);
    let bins = root.join("bin");
    std::fs::create_dir_all(&root).with_context(|| format!("create {}", root.display()))?;
    let lock = std::fs::File::create(root.join("lock"))?;
    lock.lock().context("lock the old build")?;
    if !BINARIES.iter().all(|name| bins.join(name).exists()) {
        build(&repo, &root).with_context(|| format!("build commit {UPGRADE_FROM}"))?;
        keep_binaries(&root, &bins)?;
    }
    Ok(bins)
}

/// Copies the built binaries into `bins`, then removes the sources and
/// the build directory.
fn keep_binaries(root: &Path, bins: &Path) -> Result<()> {
    let built = root.join("target").join("debug");
    std::fs::create_dir_all(bins)?;
    for name in BINARIES {
        let from = built.join(name);
        if !from.exists() {
            bail!("the old build has no {name} in {}", built.display());
        }
        // Copied, then renamed: a copy cut short is never taken for one.
        let part = bins.join(format!("{name}.part"));
        std::fs::copy(&from, &part).with_context(|| format!("copy {name}"))?;
        std::fs::rename(&part, bins.join(name)).with_context(|| format!("rename {name}"))?;
    }
    std::fs::remove_dir_all(root.join("target"))?;
    std::fs::remove_dir_all(root.join("src"))?;
    Ok(())
}

/// Where cargo builds this workspace: `$CARGO_TARGET_DIR`, or `target/`.
fn target_dir(repo: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => repo.join("target"),
    }
}

/// Exports the commit's tree to `root/src` and builds its node binaries
/// into `root/target`.
fn build(repo: &Path, root: &Path) -> Result<()> {
    let src = root.join("src");
    if src.exists() {
        std::fs::remove_dir_all(&src)?;
    }
    std::fs::create_dir_all(&src)?;
    let archive = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["archive", "--format=tar", UPGRADE_FROM])
        .stdout(Stdio::piped())
        .spawn()
        .context("run git archive (the tests need the repository's history)")?;
    let untar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&src)
        .stdin(archive.stdout.context("git archive's output")?)
        .status()
        .context("run tar")?;
    if !untar.success() {
        bail!("could not export commit {UPGRADE_FROM}: is the clone shallow?");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // At the lowest priority: tests that run beside it keep the CPU.
    let out = Command::new("nice")
        .args(["-n", "19"])
        .arg(cargo)
        .current_dir(&src)
        .args([
            "build",
            "--locked",
            "-p",
            "tally-node",
            "-p",
            "tally-tests",
            "--bin",
            "tallyd",
            "--bin",
            "tally",
            "--bin",
            "tallyd-faults",
        ])
        .env("CARGO_TARGET_DIR", root.join("target"))
        // No debug info: only the binaries are kept, and CI's disk is small.
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .env_remove("RUSTFLAGS")
        .output()
        .context("run cargo build")?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        bail!(
            "cargo build of the old commit failed:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old build is made here, in the library's unit tests, which
    /// cargo runs before the end-to-end binary: its minutes of compiling
    /// and writing would otherwise share the CPU and the disk with tests
    /// that time their answers. Its binaries run.
    #[test]
    fn the_build_to_upgrade_from_is_made_before_the_end_to_end_tests() {
        let bins = old_build().expect("build the commit upgrades start from");
        for name in BINARIES {
            let help = Command::new(bins.join(name))
                .arg("--help")
                .output()
                .expect("run the old build");
            assert!(help.status.success(), "{name} --help: {help:?}");
        }
    }
}
