//! CQL through ScyllaDB's Rust driver (the `scylla` crate, from
//! crates.io): it connects to a 3-node Tally, reads its topology and
//! schema, waits for schema agreement after each change, prepares, routes
//! by token, and counts, in counter batches too.
#![allow(clippy::unwrap_used, reason = "tests")]

use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::Counter;
use tally_tests::{Cluster, ClusterOptions, runtime};

#[test]
fn the_rust_driver_counts_with_prepared_statements_and_a_batch() {
    let cluster = Cluster::start(ClusterOptions {
        cql: true,
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.wait_agreement().unwrap();
    let addr = cluster.cql_addr(0).unwrap();
    runtime().block_on(async {
        let session: Session = SessionBuilder::new()
            .known_node_addr(addr)
            .build()
            .await
            .unwrap();
        let ddl = [
            "CREATE KEYSPACE rs WITH replication = \
             {'class': 'SimpleStrategy', 'replication_factor': 3}",
            "CREATE TABLE rs.cf (pk bigint, ck int, c counter, PRIMARY KEY (pk, ck))",
        ];
        for statement in ddl {
            session.query_unpaged(statement, &[]).await.unwrap();
        }
        let state = session.get_cluster_state();
        assert_eq!(state.get_nodes_info().len(), 3, "every node known");
        let add = session
            .prepare("UPDATE rs.cf SET c = c + ? WHERE pk = ? AND ck = ?")
            .await
            .unwrap();
        for i in 0..30i64 {
            let values = (Counter(i), i % 3, 1i32);
            session.execute_unpaged(&add, values).await.unwrap();
        }
        let mut batch = Batch::new(BatchType::Counter);
        batch.append_statement(add.clone());
        batch.append_statement(add.clone());
        let values = ((Counter(100), 0i64, 2i32), (Counter(-7), 1i64, 2i32));
        session.batch(&batch, values).await.unwrap();
        let get = session
            .prepare("SELECT ck, c FROM rs.cf WHERE pk = ?")
            .await
            .unwrap();
        let mut sums = Vec::new();
        for pk in 0..3i64 {
            let rows = session
                .execute_unpaged(&get, (pk,))
                .await
                .unwrap()
                .into_rows_result()
                .unwrap();
            for row in rows.rows::<(i32, Counter)>().unwrap() {
                let (ck, c) = row.unwrap();
                sums.push((pk, ck, c.0));
            }
        }
        // pk 0 got 0 + 3 + ... + 27, pk 1 1 + 4 + ... + 28, pk 2 the rest.
        let expected = vec![
            (0, 1, 135),
            (0, 2, 100),
            (1, 1, 145),
            (1, 2, -7),
            (2, 1, 155),
        ];
        assert_eq!(sums, expected);
    });
}
