//! What `tally-bench`'s workers send their operations to: the native
//! protocol's token-aware client, or CQL's prepared statements.

use anyhow::{Context, Result, bail};
use tally_net::{ClientError, ClusterClient, Consistency, Outcome};

use tally_net::cql::{self, CqlClient, Prepared};

/// The CQL statements the bench runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CqlStatement {
    /// `UPDATE tally_bench.counters SET c = c + ? WHERE pk = ?`, and
    /// `SELECT c FROM tally_bench.counters WHERE pk = ?` to read.
    Add,
    /// scylla-bench's: five counters of a row, each `+ 1`.
    CounterUpdate,
    /// scylla-bench's read of a partition's rows from a clustering key on.
    CounterRead,
    /// A regular table's row: `INSERT INTO tally_bench.rows (pk, v)
    /// VALUES (?, ?)` (`v` a 3-byte text, as redis-benchmark's `SET`
    /// value), and `SELECT v ... WHERE pk = ?` to read.
    Insert,
    /// `INSERT ... IF NOT EXISTS`: a lightweight transaction, each of a
    /// key no other took (the run's sequence, not `--keys`).
    InsertIfNotExists,
    /// A logged batch of three `INSERT`s, of three partitions (the key
    /// and the two after it): through the batch log.
    LoggedBatch,
    /// The same batch unlogged.
    UnloggedBatch,
    /// Rows of one wide partition, named by `--keys` (so that a run that
    /// fills it and one that reads it meet): `INSERT INTO
    /// tally_bench.wide (pk, ck, v) VALUES (?, ?, ?)` of row `ck` = the
    /// key, and to read a page of 100 rows from it, `SELECT ck, v ...
    /// WHERE pk = ? AND ck >= ? LIMIT 100`.
    WidePage,
}

impl CqlStatement {
    /// Whether its writes add (what `--verify` checks).
    pub fn adds(self) -> bool {
        matches!(
            self,
            CqlStatement::Add | CqlStatement::CounterUpdate | CqlStatement::CounterRead
        )
    }
}

/// An operation that failed: what kind of failure, and whether its
/// outcome is unknown (an add that may have been applied).
pub struct Failed {
    /// What kind of failure, for the run's tally of them.
    pub kind: String,
    /// The add may have been applied.
    pub unknown: bool,
}

/// The workers' target.
pub enum Target {
    /// The native protocol's client.
    Native(Box<ClusterClient>),
    /// CQL's prepared statements.
    Cql(CqlTarget),
}

/// The CQL statements prepared, and this run's partition keys.
pub struct CqlTarget {
    client: CqlClient,
    statement: CqlStatement,
    write: Prepared,
    read: Prepared,
    /// Put in the high bits of every partition key, so that runs do not
    /// share counters.
    run: i64,
    /// The keys `InsertIfNotExists` took so far.
    taken: std::sync::atomic::AtomicU64,
    /// `WidePage`'s partition.
    wide: i64,
}

impl Target {
    /// Adds `delta` to key `k` (`key` as the native protocol names it),
    /// or reads it.
    pub async fn op(
        &self,
        read: bool,
        (k, key): (u64, &str),
        delta: i64,
        cl: Consistency,
    ) -> Result<(), Failed> {
        match self {
            Target::Native(c) => {
                let done = match read {
                    true => c.get(key.as_bytes(), b"", cl).await.map(|_| ()),
                    false => c.add(key.as_bytes(), b"", delta, cl).await.map(|_| ()),
                };
                done.map_err(|e| Failed {
                    kind: native_kind(&e),
                    unknown: !read && e.outcome() == Outcome::Unknown,
                })
            }
            Target::Cql(t) => t.op(read, k, delta, cl).await,
        }
    }

    /// What an add of `delta` adds to the counter the check reads.
    pub fn added(&self, delta: i64) -> i64 {
        match self {
            Target::Native(_) => delta,
            Target::Cql(t) => t.adds(delta),
        }
    }

    /// The value of key `k` at `cl`, for the check after the run.
    pub async fn value(&self, (k, key): (u64, &str), cl: Consistency) -> Result<i64, String> {
        match self {
            Target::Native(c) => c
                .get(key.as_bytes(), b"", cl)
                .await
                .map_err(|e| e.to_string()),
            Target::Cql(t) => {
                let pk = t.pk(k).to_be_bytes();
                let ck = 0i64.to_be_bytes();
                let values: &[&[u8]] = match t.statement {
                    CqlStatement::Add => &[&pk],
                    _ => &[&pk, &ck],
                };
                let body = t
                    .client
                    .execute(&t.read, &pk, values, cql::consistency(cl))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(cql::first_bigint(&body).unwrap_or(0))
            }
        }
    }
}

fn native_kind(e: &ClientError) -> String {
    match e {
        ClientError::Server(w) => format!("{:?}", w.kind).to_lowercase(),
        ClientError::Timeout(_) => "client timeout".into(),
        ClientError::Closed(_) => "connection closed".into(),
        ClientError::Connect { .. } => "connect".into(),
        ClientError::Protocol(_) => "protocol".into(),
    }
}

impl CqlTarget {
    /// Makes the bench's keyspace and table if they are missing (at the
    /// cluster's replication factor `rf`), and prepares the statements.
    pub async fn setup(
        client: CqlClient,
        statement: CqlStatement,
        (rf, keys): (usize, u64),
        run: i64,
    ) -> Result<CqlTarget> {
        let (ks, table) = match statement {
            CqlStatement::Add => (
                "tally_bench",
                "CREATE TABLE IF NOT EXISTS tally_bench.counters (pk bigint PRIMARY KEY, c counter)",
            ),
            CqlStatement::Insert
            | CqlStatement::InsertIfNotExists
            | CqlStatement::LoggedBatch
            | CqlStatement::UnloggedBatch => (
                "tally_bench",
                "CREATE TABLE IF NOT EXISTS tally_bench.rows (pk bigint PRIMARY KEY, v text)",
            ),
            CqlStatement::WidePage => (
                "tally_bench",
                "CREATE TABLE IF NOT EXISTS tally_bench.wide (pk bigint, ck bigint, v text, \
                 PRIMARY KEY (pk, ck))",
            ),
            _ => (
                "scylla_bench",
                "CREATE TABLE IF NOT EXISTS scylla_bench.test_counters (pk bigint, ck bigint, \
                 c1 counter, c2 counter, c3 counter, c4 counter, c5 counter, \
                 PRIMARY KEY(pk, ck)) WITH compression = { }",
            ),
        };
        let keyspace = format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = \
             {{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        );
        for ddl in [keyspace.as_str(), table] {
            if let Err(e) = client.query(ddl).await {
                bail!("{ddl}: {e}");
            }
        }
        let (write, read) = match statement {
            CqlStatement::Add => (
                "UPDATE tally_bench.counters SET c = c + ? WHERE pk = ?",
                "SELECT c FROM tally_bench.counters WHERE pk = ?",
            ),
            CqlStatement::Insert | CqlStatement::LoggedBatch | CqlStatement::UnloggedBatch => (
                "INSERT INTO tally_bench.rows (pk, v) VALUES (?, ?)",
                "SELECT v FROM tally_bench.rows WHERE pk = ?",
            ),
            CqlStatement::InsertIfNotExists => (
                "INSERT INTO tally_bench.rows (pk, v) VALUES (?, ?) IF NOT EXISTS",
                "SELECT v FROM tally_bench.rows WHERE pk = ?",
            ),
            CqlStatement::WidePage => (
                "INSERT INTO tally_bench.wide (pk, ck, v) VALUES (?, ?, ?)",
                "SELECT ck, v FROM tally_bench.wide WHERE pk = ? AND ck >= ? LIMIT 100",
            ),
            _ => (
                "UPDATE scylla_bench.test_counters SET c1 = c1 + 1, c2 = c2 + 1, c3 = c3 + 1, \
                 c4 = c4 + 1, c5 = c5 + 1 WHERE pk = ? AND ck = ?",
                "SELECT c1, c2, c3, c4, c5 FROM scylla_bench.test_counters \
                 WHERE pk = ? AND ck >= ? LIMIT 100",
            ),
        };
        let write = client.prepare(write).await.context("prepare the update")?;
        let read = client.prepare(read).await.context("prepare the read")?;
        Ok(CqlTarget {
            client,
            statement,
            write,
            read,
            run,
            taken: std::sync::atomic::AtomicU64::new(0),
            wide: i64::try_from(keys).unwrap_or(i64::MAX),
        })
    }

    fn pk(&self, k: u64) -> i64 {
        (self.run << 32) | (k as i64 & 0xFFFF_FFFF)
    }

    async fn op(&self, read: bool, k: u64, delta: i64, cl: Consistency) -> Result<(), Failed> {
        let pk = self.pk(k).to_be_bytes();
        let (ck, delta) = (0i64.to_be_bytes(), delta.to_be_bytes());
        let cl = cql::consistency(cl);
        let read = read || self.statement == CqlStatement::CounterRead;
        let value = b"xxx";
        let done = match (self.statement, read) {
            (CqlStatement::LoggedBatch | CqlStatement::UnloggedBatch, false) => {
                let logged = self.statement == CqlStatement::LoggedBatch;
                let pks: Vec<[u8; 8]> = (0..3).map(|i| self.pk(k + i).to_be_bytes()).collect();
                let values: Vec<[&[u8]; 2]> = pks.iter().map(|pk| [&pk[..], value]).collect();
                let statements: Vec<(&Prepared, &[&[u8]])> =
                    values.iter().map(|v| (&self.write, &v[..])).collect();
                self.client.batch(&pk, (&statements, logged), cl).await
            }
            (
                CqlStatement::Add
                | CqlStatement::Insert
                | CqlStatement::LoggedBatch
                | CqlStatement::UnloggedBatch,
                true,
            ) => self.client.execute(&self.read, &pk, &[&pk], cl).await,
            (CqlStatement::Insert, false) => {
                self.client
                    .execute(&self.write, &pk, &[&pk, value], cl)
                    .await
            }
            (CqlStatement::InsertIfNotExists, _) => {
                let n = self
                    .taken
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let pk = self.pk(n | 1 << 31).to_be_bytes();
                self.client
                    .execute(&self.write, &pk, &[&pk, value], cl)
                    .await
            }
            (CqlStatement::Add, false) => {
                self.client
                    .execute(&self.write, &pk, &[&delta, &pk], cl)
                    .await
            }
            (CqlStatement::WidePage, read) => {
                let (wide, ck) = (self.wide.to_be_bytes(), (k as i64).to_be_bytes());
                match read {
                    true => {
                        self.client
                            .execute(&self.read, &wide, &[&wide, &ck], cl)
                            .await
                    }
                    false => {
                        let values: &[&[u8]] = &[&wide, &ck, value];
                        self.client.execute(&self.write, &wide, values, cl).await
                    }
                }
            }
            (_, true) => self.client.execute(&self.read, &pk, &[&pk, &ck], cl).await,
            (_, false) => self.client.execute(&self.write, &pk, &[&pk, &ck], cl).await,
        };
        done.map(|_| ()).map_err(|e| Failed {
            kind: e.kind(),
            unknown: !read && !e.not_applied(),
        })
    }

    /// Whether its adds are of `delta` (scylla-bench's add 1 each).
    pub fn adds(&self, delta: i64) -> i64 {
        match self.statement {
            CqlStatement::Add => delta,
            _ => 1,
        }
    }
}
