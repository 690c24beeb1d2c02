//! `tallyd check-log --data DIR [--truncate]`: what each commit log segment
//! of a stopped node's data directory holds, judged as replay at start-up
//! judges it (see `tally_engine::commitlog`), and, with `--truncate`, a
//! torn or corrupt tail cut off on the operator's word.
//!
//! One line per segment: its records, where its good part ends, and how it
//! ends. A torn tail is harmless (replay cuts it); a corrupt one stops the
//! node from starting, and the command then fails. Cutting a corrupt tail
//! gives up the records from the damage on: other replicas may still hold
//! them, and `tally repair` brings them back.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use tally_engine::commitlog::SegmentEnd;
use tally_engine::commitlog::check::{LogCheck, SegmentCheck};

/// Checks the log of the node whose data directory is `data` (as in its
/// config; the log is in its `engine` directory, which may be given
/// instead) and reports to `out`; with `truncate`, cuts every torn or
/// corrupt tail. Fails if corruption is left.
pub fn run(data: &Path, truncate: bool, out: &mut impl Write) -> Result<()> {
    let engine = data.join("engine");
    let dir = if engine.is_dir() { &engine } else { data };
    let mut log = LogCheck::open(dir)
        .with_context(|| format!("check the commit log in {}", dir.display()))?;
    let mut corrupt = 0;
    for i in 0..log.segments.len() {
        let s = &log.segments[i];
        writeln!(out, "{}", describe(s))?;
        let damaged = matches!(s.end, SegmentEnd::Torn { .. } | SegmentEnd::Corrupt { .. });
        if truncate && damaged {
            let (name, at) = (file_name(s), s.good_end());
            log.truncate(i)
                .with_context(|| format!("truncate {name} at offset {at}"))?;
            writeln!(out, "{name}: cut at offset {at}")?;
        } else if s.is_corrupt() {
            corrupt += 1;
        }
    }
    let records: u64 = log.segments.iter().map(|s| s.records).sum();
    writeln!(out, "{} segments, {records} records", log.segments.len())?;
    if corrupt > 0 {
        bail!(
            "{corrupt} corrupt segment(s) in {}: the node will not start; \
             `tallyd check-log --truncate` cuts each at its damage, giving up the records after it",
            dir.display()
        );
    }
    Ok(())
}

/// One segment's line of the report.
pub fn describe(s: &SegmentCheck) -> String {
    let state = match &s.end {
        SegmentEnd::Clean => "clean".to_string(),
        SegmentEnd::Zeros { offset } => {
            format!(
                "ends in zeros from offset {offset} (laid down ahead of records; replay trims them)"
            )
        }
        SegmentEnd::Torn { offset, reason } => {
            format!("TORN TAIL at offset {offset}: {reason} (replay cuts it)")
        }
        SegmentEnd::Corrupt { offset, reason } => {
            format!("CORRUPT at offset {offset}: {reason} (replay refuses to start)")
        }
    };
    format!(
        "{}: format {}, {} records, good up to offset {} of {} bytes; {state}",
        file_name(s),
        s.version,
        s.records,
        s.good_end(),
        s.bytes
    )
}

fn file_name(s: &SegmentCheck) -> String {
    s.path.file_name().map_or_else(
        || s.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(end: SegmentEnd) -> SegmentCheck {
        SegmentCheck {
            id: 3,
            path: "/data/n1/000003.log".into(),
            version: 2,
            bytes: 65536,
            records: 41,
            end,
        }
    }

    #[test]
    fn each_ending_reads_as_what_replay_does_with_it() {
        assert_eq!(
            describe(&segment(SegmentEnd::Clean)),
            "000003.log: format 2, 41 records, good up to offset 65536 of 65536 bytes; clean"
        );
        let zeros = describe(&segment(SegmentEnd::Zeros { offset: 2000 }));
        assert!(
            zeros.contains("good up to offset 2000 of 65536") && zeros.contains("ends in zeros")
        );
        let torn = describe(&segment(SegmentEnd::Torn {
            offset: 4076,
            reason: "checksum mismatch: a zero-filled gap".into(),
        }));
        assert!(
            torn.contains("TORN TAIL at offset 4076: checksum mismatch"),
            "{torn}"
        );
        let corrupt = describe(&segment(SegmentEnd::Corrupt {
            offset: 100,
            reason: "bad".into(),
        }));
        assert!(corrupt.contains("CORRUPT at offset 100: bad"), "{corrupt}");
    }
}
