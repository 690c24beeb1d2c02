//! Golden bytes: messages carrying every change, list change, epoch and
//! shard shape, encoded, against the bytes the wire had when these types
//! were `net`'s own mirrors of the engine's (before `tally-model`). A type
//! moved or reordered must not move a byte.

#![allow(clippy::unwrap_used, reason = "tests")]

use crate::list::{End, ListChange, ListReply};
use crate::wire::*;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn epoch() -> Epoch {
    Epoch {
        n: 300,
        origin: 7,
        base: -5,
        expiry: Expiry {
            at_ms: 1_700_000_000_123,
            stamp: Stamp {
                ms: 1_700_000_000_000,
                id: 9,
            },
        },
        fold: 2,
    }
}

fn cell(list: Option<Vec<Vec<u8>>>) -> WireCell {
    WireCell {
        epoch: epoch(),
        shards: [(1, 2, -3), (u64::MAX, 70_000, i64::MIN)]
            .into_iter()
            .map(|(counter_id, clock, value)| Shard {
                counter_id,
                clock,
                value,
            })
            .collect(),
        list: list.map(Into::into),
    }
}

fn changes() -> Vec<Change> {
    let mut out = Vec::new();
    for (ttl, only) in [
        (Ttl::Clear, Presence::Any),
        (Ttl::Keep, Presence::Absent),
        (Ttl::At(1_700_000_000_999), Presence::Live),
    ] {
        out.push(Change::Set {
            value: -42,
            ttl,
            only,
        });
    }
    for only in [
        When::Always,
        When::NoDeadline,
        When::HasDeadline,
        When::Later,
        When::Sooner,
        When::SoonerThanOne,
    ] {
        out.push(Change::Expire { at_ms: 5_000, only });
    }
    out.push(Change::Delete);
    out
}

fn list_changes() -> Vec<ListChange> {
    vec![
        ListChange::Push {
            end: End::Left,
            values: vec![b"a".to_vec(), Vec::new()],
            only_existing: false,
        },
        ListChange::Push {
            end: End::Right,
            values: vec![b"bc".to_vec()],
            only_existing: true,
        },
        ListChange::Pop {
            end: End::Right,
            count: 300,
        },
        ListChange::Trim {
            start: -1,
            stop: 200,
        },
        ListChange::Set {
            index: -2,
            value: b"v".to_vec(),
        },
        ListChange::Remove {
            count: -3,
            value: b"r".to_vec(),
        },
        ListChange::Insert {
            before: true,
            pivot: b"p".to_vec(),
            value: b"x".to_vec(),
        },
    ]
}

fn requests() -> Vec<PeerRequest> {
    let key = WireKey::new(b"part", b"col");
    let mut out = vec![
        PeerRequest::Apply {
            key: key.clone(),
            cell: cell(None),
        },
        PeerRequest::Apply {
            key: key.clone(),
            cell: cell(Some(vec![b"e1".to_vec(), Vec::new()])),
        },
    ];
    for (i, change) in changes().into_iter().enumerate() {
        out.push(PeerRequest::LeaderChange {
            key: key.clone(),
            change,
            reads: i % 2 == 0,
            cl: Consistency::Quorum,
        });
    }
    for change in list_changes() {
        out.push(PeerRequest::LeaderList {
            key: key.clone(),
            change,
            cl: Consistency::All,
        });
    }
    out
}

fn responses() -> Vec<PeerResponse> {
    vec![
        PeerResponse::Cell(cell(None)),
        PeerResponse::Stale { epoch: epoch() },
        PeerResponse::Changed(Changed {
            applied: true,
            before: Some(-7),
        }),
        PeerResponse::Changed(Changed {
            applied: false,
            before: None,
        }),
        PeerResponse::Listed(ListReply::Int(-1)),
        PeerResponse::Listed(ListReply::Popped(vec![b"a".to_vec(), b"bc".to_vec()])),
        PeerResponse::Listed(ListReply::Done),
    ]
}

fn client_messages() -> Vec<Vec<u8>> {
    let key = WireKey::new(b"k", b"");
    let mut out = Vec::new();
    for change in changes() {
        out.push(encode(&ClientRequest {
            id: 5,
            op: ClientOp::Change {
                key: key.clone(),
                change,
                cl: Consistency::One,
            },
        }));
    }
    out.push(encode(&ClientResponse {
        id: 5,
        result: Ok(ClientReply::Changed(Changed {
            applied: true,
            before: Some(i64::MAX),
        })),
    }));
    out.push(encode(&ClientResponse {
        id: 6,
        result: Ok(ClientReply::Cell(cell(Some(vec![b"z".to_vec()])))),
    }));
    out
}

/// Every message above, encoded: the peer batches, then each client frame.
fn encoded() -> Vec<String> {
    let mut out = vec![hex(&encode(&requests())), hex(&encode(&responses()))];
    out.extend(client_messages().iter().map(|m| hex(m)));
    out
}

/// What [`encoded`] gave with the mirrored types.
const GOLDEN: &[&str] = &[
    concat!(
        "1301047061727403636f6cfb2c010709fd7b68e5cf8b010000fd0068e5cf8b010000090202010205fdffffff",
        "fffffffffffc70110100fdffffffffffffffff0001047061727403636f6cfb2c010709fd7b68e5cf8b010000",
        "fd0068e5cf8b010000090202010205fdfffffffffffffffffc70110100fdffffffffffffffff010202653100",
        "0b047061727403636f6c0053000001010b047061727403636f6c0053010100010b047061727403636f6c0053",
        "02fde76be5cf8b0100000201010b047061727403636f6c01fb88130000010b047061727403636f6c01fb8813",
        "0101010b047061727403636f6c01fb88130200010b047061727403636f6c01fb88130301010b047061727403",
        "636f6c01fb88130400010b047061727403636f6c01fb88130501010b047061727403636f6c02000118047061",
        "727403636f6c000002016100000218047061727403636f6c000101026263010218047061727403636f6c0101",
        "fb2c010218047061727403636f6c0201fb90010218047061727403636f6c030301760218047061727403636f",
        "6c040501720218047061727403636f6c05010170017802",
    ),
    concat!(
        "0702fb2c010709fd7b68e5cf8b010000fd0068e5cf8b010000090202010205fdfffffffffffffffffc701101",
        "00fdffffffffffffffff0007fb2c010709fd7b68e5cf8b010000fd0068e5cf8b01000009020b01010d0b0000",
        "13000113010201610262631302",
    ),
    "050a016b000053000000",
    "050a016b000053010100",
    "050a016b00005302fde76be5cf8b0100000200",
    "050a016b0001fb88130000",
    "050a016b0001fb88130100",
    "050a016b0001fb88130200",
    "050a016b0001fb88130300",
    "050a016b0001fb88130400",
    "050a016b0001fb88130500",
    "050a016b000200",
    "0500060101fdfeffffffffffffff",
    concat!(
        "060007fb2c010709fd7b68e5cf8b010000fd0068e5cf8b010000090202010205fdfffffffffffffffffc7011",
        "0100fdffffffffffffffff0101017a",
    ),
];

#[test]
fn moved_types_keep_their_bytes() {
    assert_eq!(encoded(), GOLDEN);
}
