//! `tallyd check-log` over the data directory of a real node killed with
//! SIGKILL: it reports each segment as start-up would judge it, and cuts a
//! torn or corrupt tail only when told to.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, bin, runtime as rt};

fn check_log(data: &Path, truncate: bool) -> Output {
    let mut cmd = Command::new(bin("tallyd").unwrap());
    cmd.arg("check-log").arg("--data").arg(data);
    if truncate {
        cmd.arg("--truncate");
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The segment holding records, and where each of its records starts (the
/// sync mark ending each write, the top bit of its length set, skipped).
fn records(data: &Path) -> (PathBuf, Vec<usize>) {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let segment = logs.pop().unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    let mut starts = Vec::new();
    let mut at = 16;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        if len == 0 {
            break; // the zeros laid down ahead of the records
        }
        if len & 0x8000_0000 == 0 {
            starts.push(at);
        }
        at += 8 + (len & 0x7fff_ffff) as usize;
    }
    (segment, starts)
}

#[test]
fn check_log_reports_and_cuts_only_when_told() {
    let mut cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        for k in 0..20 {
            let key = format!("k{k}");
            c.add(key.as_bytes(), b"", k + 1, Consistency::One)
                .await
                .unwrap();
        }
    });
    cluster.kill(0).unwrap();
    let data = cluster.config.nodes[0].data_dir.clone();
    let (segment, starts) = records(&data.join("engine"));
    assert!(starts.len() >= 20, "{} records", starts.len());
    let name = segment.file_name().unwrap().to_string_lossy().into_owned();

    // Killed: the segment ends in the zeros laid down ahead of its records.
    let out = check_log(&data, false);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{name}: format 6")),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("ends in zeros"), "{}", text(&out));

    // The last record torn: reported, left alone, then cut when told.
    let last = *starts.last().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(last as u64 + 10).unwrap();
    let out = check_log(&data, false);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("TORN TAIL at offset {last}")),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), last as u64 + 10);
    let out = check_log(&data, true);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{name}: cut at offset {last}")),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), last as u64);

    // Garbage in an acknowledged record: corrupt, the node will not start.
    let fifth = starts[4];
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[fifth + 12] ^= 0x55;
    std::fs::write(&segment, &bytes).unwrap();
    let out = check_log(&data, false);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("CORRUPT at offset {fifth}: checksum mismatch")),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("the node will not start"),
        "{}",
        text(&out)
    );
    assert!(
        cluster.restart(0).is_err(),
        "a node starts on a corrupt log"
    );
    cluster.kill(0).unwrap();

    // The operator cuts it: the records before the damage remain.
    let out = check_log(&data, true);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), fifth as u64);
    let out = check_log(&data, false);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("; clean"), "{}", text(&out));
    cluster.restart(0).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        let first = c.get(b"k0", b"", Consistency::One).await.unwrap();
        assert_eq!(first, 1, "a record before the cut");
    });

    // A running node's directory is locked: nothing is checked or cut.
    let out = check_log(&data, true);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("in use"), "{}", text(&out));
}
