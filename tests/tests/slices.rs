//! A partition read a slice at a time (`cluster::slice`) while its
//! replicas disagree on which rows it holds: a node that was down while
//! half the rows were written and the first of them deleted (its hints
//! dropped) coordinates reads of one row a page. Each replica's slice
//! then ends at a different row, and the first slice holds only deleted
//! rows, so the page reads on from where the slice was exact. The answer
//! must hold every live row; in the broken build whose merge trusts the
//! longest answer (`--unsafe-slice-trusts-longest`), the rows that only
//! the short answer's replica held are lost, and the test says so.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use tally_net::cql::{CqlClient, paging_state, rows};
use tally_net::ring::Ring;
use tally_tests::{Cluster, ClusterOptions, runtime};

use crate::cql::cql_cluster;

const QUORUM: u16 = 0x04;

#[test]
fn a_page_holds_every_row_when_replicas_slices_end_apart() {
    assert_eq!(rows_read(false), (3..12).collect::<Vec<i32>>());
}

#[test]
fn a_merge_that_trusts_the_longest_slice_loses_rows() {
    let got = rows_read(true);
    assert!(
        got.len() < 9,
        "the broken build answered every row: {got:?}"
    );
}

/// Rows 0..6 written and 0..3 deleted while n3 was down (its hints
/// dropped), 6..12 written with it up; then the partition read through n3
/// at QUORUM, a row a page: the rows it answered.
fn rows_read(broken: bool) -> Vec<i32> {
    let mut cluster = cql_cluster(ClusterOptions {
        daemon: "tallyd-faults",
        run_args: match broken {
            true => vec!["--unsafe-slice-trusts-longest".into()],
            false => Vec::new(),
        },
        cluster_tables: "[cluster.hints]\nwindow_ms = 100\n".into(),
        ..ClusterOptions::default()
    });
    let rt = runtime();
    let n1 = rt.block_on(connect(&cluster, 0));
    for q in [
        "CREATE KEYSPACE s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}",
        "CREATE TABLE s.t (k int, c int, v int, PRIMARY KEY (k, c))",
    ] {
        rt.block_on(n1.query(q)).unwrap();
    }
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(30)).unwrap();
    let insert = rt
        .block_on(n1.prepare("INSERT INTO s.t (k, c, v) VALUES (1, ?, ?)"))
        .unwrap();
    let write = |c: i32| {
        let (c, v) = (c.to_be_bytes(), (c * 10).to_be_bytes());
        rt.block_on(n1.execute_on(0, &insert, &[&c, &v], QUORUM, None))
            .unwrap();
    };
    (0..6).for_each(write);
    let delete = "DELETE FROM s.t WHERE k = 1 AND c >= 0 AND c < 3";
    rt.block_on(n1.query(delete)).unwrap();
    // Past the hint window: the hints for n3 are dropped.
    std::thread::sleep(Duration::from_millis(1500));
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    (6..12).for_each(write);
    let n3 = rt.block_on(connect(&cluster, 2));
    let read = rt
        .block_on(n3.prepare("SELECT c FROM s.t WHERE k = ?"))
        .unwrap();
    let mut got = Vec::new();
    let mut state: Option<Vec<u8>> = None;
    for _ in 0..20 {
        let page = (1, state.as_deref());
        let body = rt
            .block_on(n3.execute_page(0, (&read, &[&1i32.to_be_bytes()]), QUORUM, page))
            .unwrap();
        for row in rows(&body).unwrap() {
            let c = row[0].as_deref().unwrap();
            got.push(i32::from_be_bytes(c.try_into().unwrap()));
        }
        state = paging_state(&body);
        if state.is_none() {
            break;
        }
    }
    got
}

/// A connection to node `i` alone.
async fn connect(cluster: &Cluster, i: usize) -> CqlClient {
    let addr = cluster.cql_addr(i).unwrap();
    CqlClient::connect(&[addr], Ring::new(&["n".to_string()], 1, 1), None)
        .await
        .unwrap()
}
