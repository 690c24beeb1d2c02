# Regular tables through the Python driver against a 3-node Tally. argv =
# CQL port, phase: "write" (every node up), then "degraded" (the test
# killed the third node in between).
import datetime
import sys
import time
import uuid

from cassandra import ConsistencyLevel, InvalidRequest, Unavailable
from cassandra.cluster import Cluster
from cassandra.query import BatchStatement, BatchType, SimpleStatement
from cassandra.util import Date, Time

port, phase = int(sys.argv[1]), sys.argv[2]
cluster = Cluster(["127.0.0.1"], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()


def at(query, level):
    return SimpleStatement(query, consistency_level=level)


def expect(error, words, statement, *args, **kwargs):
    try:
        session.execute(statement, *args, **kwargs)
    except error as e:
        assert words in str(e), (statement, e)
        return
    raise AssertionError(f"{statement} answered")


when = datetime.datetime(2026, 11, 30, 12, 0, 0, 250000)
row = dict(
    k="k1", c=3, s="shared", a="ascii", i=-7, b=9000000000, sm=-300, t=5,
    vi=123456789012345678901234567890, f=1.5, d=-2.25, ok=True,
    u=uuid.UUID("12345678-9abc-def0-1234-56789abcdef0"),
    tu=uuid.UUID("d2177dd0-eaa2-11de-a572-001b779c76e3"),
    ts=when, day=Date(datetime.date(2024, 2, 29)), tm=Time(29574123456789),
    bl=b"\x00\xff", ip="::1",
)
columns = ", ".join(row)

if phase == "write":
    session.execute(
        "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.set_keyspace("ks")
    session.execute(
        "CREATE TABLE every (k text, c int, s text STATIC, a ascii, i int, b bigint, sm smallint, "
        "t tinyint, vi varint, f float, d double, ok boolean, u uuid, tu timeuuid, ts timestamp, "
        "day date, tm time, bl blob, ip inet, PRIMARY KEY (k, c)) WITH CLUSTERING ORDER BY (c DESC)"
    )
    table = cluster.metadata.keyspaces["ks"].tables["every"]
    assert table.clustering_key[0].is_reversed and table.columns["s"].is_static

    # Prepared: every type goes in and comes back as the driver wrote it.
    insert = session.prepare(
        f"INSERT INTO every ({columns}) VALUES ({', '.join('?' * len(row))}) USING TTL ?"
    )
    assert insert.routing_key_indexes == [0], insert.routing_key_indexes
    session.execute(insert, list(row.values()) + [1000])
    got = session.execute("SELECT * FROM every WHERE k = 'k1'").one()
    for name, value in row.items():
        assert getattr(got, name) == value, (name, getattr(got, name), value)
    ttl = session.execute("SELECT ttl(a), writetime(a), ttl(s) FROM every WHERE k = 'k1'").one()
    assert 990 <= ttl[0] <= 1000, ttl
    assert abs(ttl[1] - time.time() * 1e6) < 60e6, "the driver's client timestamp"

    # Last write wins by timestamp, whatever the order they arrive in.
    upd = "UPDATE every USING TIMESTAMP %s SET a = %s WHERE k = 'k2' AND c = 1"
    session.execute(upd, [2000, "newer"])
    session.execute(upd, [1000, "older"])
    got = session.execute("SELECT a, writetime(a) FROM every WHERE k = 'k2' AND c = 1").one()
    assert (got.a, got[1]) == ("newer", 2000), got

    # Rows in clustering order (descending), paged by the driver.
    page = session.prepare("INSERT INTO every (k, c, i) VALUES ('paged', ?, ?)")
    for c in range(250):
        session.execute(page, [c, c * 2])
    select = SimpleStatement("SELECT c, i FROM every WHERE k = 'paged'", fetch_size=100)
    cs = [(r.c, r.i) for r in session.execute(select)]
    assert cs == [(c, 2 * c) for c in reversed(range(250))], cs[:5]
    # A range of rows deleted; a row of them written again after.
    session.execute("DELETE FROM every WHERE k = 'paged' AND c >= 10 AND c < 240")
    session.execute("INSERT INTO every (k, c) VALUES ('paged', 100)")
    cs = [r.c for r in session.execute("SELECT c FROM every WHERE k = 'paged'")]
    assert cs == list(reversed(range(240, 250))) + [100] + list(reversed(range(10))), cs

    # A logged batch of one partition, prepared and not.
    batch = BatchStatement(batch_type=BatchType.LOGGED)
    batch.add(page, [1000, 1])
    batch.add("UPDATE every SET i = 2 WHERE k = 'paged' AND c = 1001")
    session.execute(batch)
    got = session.execute("SELECT c, i FROM every WHERE k = 'paged' AND c IN (1000, 1001)")
    assert sorted((r.c, r.i) for r in got) == [(1000, 1), (1001, 2)]
    # A logged batch of three partitions goes through the batch log.
    logged = BatchStatement(batch_type=BatchType.LOGGED)
    for k in ("b1", "b2", "b3"):
        logged.add("INSERT INTO every (k, c, a) VALUES (%s, 1, 'logged')", (k,))
    session.execute(logged)
    got = session.execute("SELECT k, a FROM every WHERE k IN ('b1', 'b2', 'b3') AND c = 1")
    assert sorted((r.k, r.a) for r in got) == [(k, "logged") for k in ("b1", "b2", "b3")]

    # A conditional batch: one transaction on one partition, all or nothing.
    session.execute("INSERT INTO every (k, c, a) VALUES ('cas', 1, 'one')")
    cas = session.prepare("UPDATE every SET a = ? WHERE k = 'cas' AND c = ? IF a = ?")
    batch = BatchStatement()
    batch.add(cas, ["uno", 1, "one"])
    batch.add("INSERT INTO every (k, c, a) VALUES ('cas', 2, 'dos') IF NOT EXISTS")
    assert session.execute(batch).was_applied
    failed = BatchStatement()
    failed.add(cas, ["eins", 1, "uno"])
    failed.add(cas, ["zwei", 2, "two"])
    answer = list(session.execute(failed))
    assert [(r[0], r.k, r.c, r.a) for r in answer] == [
        (False, "cas", 2, "dos"), (False, "cas", 1, "uno")], answer
    got = session.execute("SELECT c, a FROM every WHERE k = 'cas'")
    assert [(r.c, r.a) for r in got] == [(2, "dos"), (1, "uno")], "nothing of it applied"
    spans = BatchStatement()
    spans.add(cas, ["x", 1, "uno"])
    spans.add("UPDATE every SET a = 'y' WHERE k = 'other' AND c = 1")
    expect(InvalidRequest, "cannot span multiple partitions", spans)
    expect(InvalidRequest, "counter", "BEGIN COUNTER BATCH INSERT INTO every (k, c) VALUES ('x', 1); APPLY BATCH")
    expect(InvalidRequest, "Cannot mix counter and non counter columns",
           "CREATE TABLE mixed (k int PRIMARY KEY, n counter, v text)")
    expect(InvalidRequest, "PRIMARY KEY part c found in SET part",
           "UPDATE every SET c = 1 WHERE k = 'x' AND c = 2")

    # Columns added and dropped; a dropped one's cells are not read again.
    session.execute("ALTER TABLE every ADD extra text")
    session.execute("INSERT INTO every (k, c, extra) VALUES ('alt', 1, 'e')")
    assert session.execute("SELECT extra FROM every WHERE k = 'alt'").one().extra == "e"
    session.execute("ALTER TABLE every DROP extra")
    expect(InvalidRequest, "Undefined column name extra", "SELECT extra FROM every WHERE k = 'alt'")
    expect(InvalidRequest, "incompatible with previous type text",
           "ALTER TABLE every ADD extra int")
    # Added again: the cells written before the drop stay unread.
    session.execute("ALTER TABLE every ADD extra text")
    assert session.execute("SELECT extra FROM every WHERE k = 'alt'").one().extra is None
    session.execute("UPDATE every SET extra = 'again' WHERE k = 'alt' AND c = 1")
    assert session.execute("SELECT extra FROM every WHERE k = 'alt'").one().extra == "again"
    session.execute("UPDATE every SET i = NULL WHERE k = 'alt' AND c = 1")
    got = session.execute("SELECT k, c, i FROM every WHERE k = 'alt'").one()
    assert (got.k, got.c, got.i) == ("alt", 1, None), "the INSERT's row marker keeps it"
else:
    session.set_keyspace("ks")
    quorum = at("INSERT INTO every (k, c, a) VALUES ('down', 1, 'q')", ConsistencyLevel.QUORUM)
    session.execute(quorum)
    read = at("SELECT a FROM every WHERE k = 'down' AND c = 1", ConsistencyLevel.QUORUM)
    assert session.execute(read).one().a == "q"
    expect(Unavailable, "ALL",
           at("INSERT INTO every (k, c, a) VALUES ('down', 2, 'all')", ConsistencyLevel.ALL))
    got = session.execute(at("SELECT * FROM every WHERE k = 'k1'", ConsistencyLevel.QUORUM)).one()
    assert got.vi == row["vi"] and got.s == "shared", got
cluster.shutdown()
print("ok")
