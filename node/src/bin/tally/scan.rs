//! `tally scan`: the cluster's live keys, streamed page by page.

use std::io::Write;

use serde_json::json;
use tally_net::scan::{PAGE_KEYS, Pages, Scan};
use tally_net::wire::WireKind;
use tally_net::{ClientError, Consistency};

use super::Target;

/// The kind of a key as `tally scan` prints it.
fn kind_name(kind: WireKind) -> &'static str {
    match kind {
        WireKind::Counter => "counter",
        WireKind::List => "list",
        WireKind::Row => "row",
        WireKind::Unique => "unique",
        WireKind::SortedSet => "zset",
    }
}

/// Prints the live keys that begin with `prefix`, at most `limit`, one a
/// line (`partition<TAB>kind`, or JSON lines); answers how many.
pub(crate) async fn run(
    target: &Target,
    prefix: &[u8],
    limit: Option<u64>,
    cl: Consistency,
    json: bool,
) -> Result<u64, ClientError> {
    match target {
        Target::One(c) => print(Scan::new(c, prefix, PAGE_KEYS, cl), limit, json).await,
        Target::Ring(c) => print(Scan::new(&**c, prefix, PAGE_KEYS, cl), limit, json).await,
    }
}

async fn print<P: Pages>(
    mut scan: Scan<'_, P>,
    limit: Option<u64>,
    json: bool,
) -> Result<u64, ClientError> {
    let mut out = std::io::stdout().lock();
    let mut n = 0;
    while limit.is_none_or(|l| n < l) {
        let Some(k) = scan.next().await? else {
            break;
        };
        let partition = String::from_utf8_lossy(&k.partition);
        let kind = kind_name(k.kind);
        let line = match json {
            true => json!({ "partition": partition, "kind": kind }).to_string(),
            false => format!("{partition}\t{kind}"),
        };
        // A closed pipe (`tally scan | head`) ends the scan quietly.
        if writeln!(out, "{line}").is_err() {
            break;
        }
        n += 1;
    }
    Ok(n)
}
