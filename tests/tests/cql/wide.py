# A wide partition through the Python driver against a 3-node Tally:
# 12,000 rows (24,000 cells, past the 10,000 one answer holds) read page by
# page in clustering order (a DESC column first), by a range, reversed,
# counted, limited, with a static column, a range deleted and a row added
# behind the pages. argv = CQL port.
import sys

from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import SimpleStatement

port = int(sys.argv[1])
cluster = Cluster(["127.0.0.1"], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
session.execute(
    "CREATE KEYSPACE wd WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
)
session.execute("CREATE TABLE wd.votes (poll text, at int, voter text, v int, s text static, "
                "PRIMARY KEY (poll, at, voter)) WITH CLUSTERING ORDER BY (at DESC, voter ASC)")
insert = session.prepare("INSERT INTO wd.votes (poll, at, voter, v) VALUES (?, ?, ?, ?)")
# Partition p: 12,000 rows; partition q: 200.
args = [("p", at, voter, at * 10) for at in range(-3000, 3000) for voter in ("x", "y")]
args += [("q", at, voter, at * 10) for at in range(-3000, -2900) for voter in ("x", "y")]
for ok, result in execute_concurrent_with_args(session, insert, args, concurrency=64):
    assert ok, result
session.execute("UPDATE wd.votes SET s = 'shared' WHERE poll = 'p'")


def rows(query, fetch_size, *values):
    statement = SimpleStatement(query, fetch_size=fetch_size)
    return [tuple(r) for r in session.execute(statement, values)]


def same(got, want):
    """Whether two lists of rows match; says where they part if not."""
    if got == want:
        return True
    at = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    print(f"{len(got)} rows, {len(want)} wanted; at {at}: {got[at:at + 3]} != {want[at:at + 3]}",
          file=sys.stderr)
    return False


every = [(at, voter) for at in range(2999, -3001, -1) for voter in ("x", "y")]

# Every row, 1,000 a page, in clustering order: at DESC, voter ASC.
got = rows("SELECT at, voter FROM wd.votes WHERE poll = 'p'", 1000)
assert same(got, every)

# A range of rows, 50 a page; and a range within one `at`.
got = rows("SELECT at, voter FROM wd.votes WHERE poll = 'p' AND at >= -100 AND at < 250", 50)
assert same(got, [r for r in every if -100 <= r[0] < 250])
got = rows("SELECT at, voter FROM wd.votes WHERE poll = 'p' AND at = 7 AND voter > 'x'", 50)
assert got == [(7, "y")], got
got = rows("SELECT at, voter FROM wd.votes WHERE poll = 'p' AND at IN (5, -5, 2999)", 3)
assert got == [(2999, "x"), (2999, "y"), (5, "x"), (5, "y"), (-5, "x"), (-5, "y")], got

# Reversed, 700 a page (each page reads forward, holding only its rows).
got = rows("SELECT at, voter FROM wd.votes WHERE poll = 'p' ORDER BY at ASC, voter DESC", 700)
assert same(got, every[::-1])
reverse = "ORDER BY at ASC, voter DESC"
got = rows(f"SELECT at, voter FROM wd.votes WHERE poll = 'p' {reverse} LIMIT 5", 100)
assert same(got, every[::-1][:5])
got = rows(f"SELECT at, voter FROM wd.votes WHERE poll = 'p' AND at >= -100 AND at < 250 {reverse}", 50)
assert same(got, [r for r in every[::-1] if -100 <= r[0] < 250])

# Counted, limited, the static column with every row.
assert rows("SELECT count(*) FROM wd.votes WHERE poll = 'p'", 100) == [(12000,)]
assert same(rows("SELECT at, voter FROM wd.votes WHERE poll = 'p' LIMIT 7", 3), every[:7])
got = rows("SELECT s, v FROM wd.votes WHERE poll = 'p' AND at < -2998", 10)
assert got == [("shared", -29990), ("shared", -29990), ("shared", -30000), ("shared", -30000)], got
got = rows("SELECT poll, at FROM wd.votes WHERE poll IN ('p', 'q') PER PARTITION LIMIT 3", 2)
assert same(got, [("p", 2999), ("p", 2999), ("p", 2998), ("q", -2901), ("q", -2901), ("q", -2902)])

# A lightweight transaction on a row of the wide partition, and a read
# of it at SERIAL: each reads the partition whole (24,000 cells).
lwt = "UPDATE wd.votes SET v = 1 WHERE poll = 'p' AND at = 5 AND voter = 'x' IF v = 50"
assert session.execute(lwt).one()[0] is True
serial = SimpleStatement("SELECT v FROM wd.votes WHERE poll = 'p' AND at = 5 AND voter = 'x'",
                         consistency_level=ConsistencyLevel.SERIAL)
assert [tuple(r) for r in session.execute(serial)] == [(1,)]

# A range deleted: the pages go around it.
session.execute("DELETE FROM wd.votes WHERE poll = 'p' AND at > 0 AND at <= 2000")
left = [r for r in every if not 0 < r[0] <= 2000]
assert same(rows("SELECT at, voter FROM wd.votes WHERE poll = 'p'", 999), left)
assert rows("SELECT count(*) FROM wd.votes WHERE poll = 'p'", 100) == [(len(left),)]

# Small partitions with a static column: a page that ends on a
# partition's last row, PER PARTITION LIMIT over pages shorter than it,
# and a LIMIT whose first slice holds deleted rows only.
session.execute("CREATE TABLE wd.st (k int, c int, s text static, v int, PRIMARY KEY (k, c))")
for k in (1, 2):
    for c in range(5):
        session.execute("INSERT INTO wd.st (k, c, v) VALUES (%s, %s, %s)", (k, c, c))
    session.execute("UPDATE wd.st SET s = 'shared' WHERE k = %s", (k,))
both = [(k, c) for k in (1, 2) for c in range(5)]
assert same(rows("SELECT k, c FROM wd.st WHERE k IN (1, 2)", 5), both)
got = rows("SELECT k, c FROM wd.st WHERE k IN (1, 2) PER PARTITION LIMIT 4", 2)
assert same(got, [r for r in both if r[1] < 4])
session.execute("DELETE FROM wd.st WHERE k = 1 AND c < 4")
assert same(rows("SELECT k, c, s FROM wd.st WHERE k = 1 LIMIT 1", 100), [(1, 4, "shared")])
assert same(rows("SELECT k, c FROM wd.st WHERE k IN (1, 2)", 1), both[4:])

# A row written behind the pages is not answered; one ahead of them is.
statement = SimpleStatement("SELECT at, voter FROM wd.votes WHERE poll = 'p'", fetch_size=500)
result = session.execute(statement)
seen = [tuple(r) for r in result.current_rows]
session.execute("INSERT INTO wd.votes (poll, at, voter, v) VALUES ('p', 2999, 'a', 1)")
session.execute("INSERT INTO wd.votes (poll, at, voter, v) VALUES ('p', -3000, 'a', 1)")
while result.has_more_pages:
    result.fetch_next_page()
    seen += [tuple(r) for r in result.current_rows]
want = left[:-2] + [(-3000, "a")] + left[-2:]
assert same(seen, want)
print("ok")
