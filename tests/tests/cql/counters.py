# Counter tables through the Python cassandra-driver against a 3-node Tally.
# argv = CQL port, phase: "write" (every node up), then "degraded" (the
# test killed the third node in between).
import struct
import sys
import time
import uuid
from datetime import date

from cassandra import ConsistencyLevel, InvalidRequest, Unavailable
from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.query import BatchStatement, BatchType, SimpleStatement

port, phase = int(sys.argv[1]), sys.argv[2]
ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def at(query, level):
    return SimpleStatement(query, consistency_level=level)


def expect(error, words, statement, *args, **kwargs):
    try:
        session.execute(statement, *args, **kwargs)
    except error as e:
        assert words in str(e), (statement, e)
        return
    raise AssertionError(f"{statement} answered")


cluster = Cluster(ips[:1], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()

if phase == "write":
    session.execute(
        "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.set_keyspace("ks")
    # ScyllaDB's counter example, with `pk int`.
    session.execute("CREATE TABLE cf (pk int PRIMARY KEY, my_counter counter)")
    session.execute("UPDATE cf SET my_counter = my_counter + 6 WHERE pk = 0")
    session.execute("UPDATE cf SET my_counter = my_counter - 1 WHERE pk = 0")
    row = session.execute("SELECT * FROM cf WHERE pk = 0").one()
    assert (row.pk, row.my_counter) == (0, 5), row
    assert session.execute("SELECT * FROM cf WHERE pk = 1").one() is None

    # Prepared, token-aware: the driver hashes the bound key as Tally does,
    # so it sends each add to a replica; every node then reads the sum.
    add = session.prepare("UPDATE cf SET my_counter = my_counter + ? WHERE pk = ?")
    assert add.routing_key_indexes == [1], add.routing_key_indexes
    for pk in range(20):
        for _ in range(3):
            session.execute(add, [pk + 1, pk + 100])
    get = session.prepare("SELECT my_counter FROM cf WHERE pk = ?")
    for pk in range(20):
        for host in cluster.metadata.all_hosts():
            for _ in range(100):
                try:
                    row = session.execute(get, [pk + 100], host=host).one()
                    break
                except NoHostAvailable:
                    time.sleep(0.1)
            assert row.my_counter == 3 * (pk + 1), (pk, host, row)

    # A counter batch, prepared and not.
    batch = BatchStatement(batch_type=BatchType.COUNTER)
    batch.add(add, [10, 7])
    batch.add("UPDATE cf SET my_counter = my_counter + %s WHERE pk = %s", [20, 8])
    session.execute(batch)
    session.execute(
        "BEGIN COUNTER BATCH UPDATE cf SET my_counter = my_counter + 1 WHERE pk = 7; "
        "UPDATE cf SET my_counter = my_counter + 1 WHERE pk = 8; APPLY BATCH"
    )
    rows = session.execute("SELECT pk, my_counter FROM cf WHERE pk IN (7, 8)")
    assert sorted((r.pk, r.my_counter) for r in rows) == [(7, 11), (8, 21)]
    expect(InvalidRequest, "logged batch",
           "BEGIN BATCH UPDATE cf SET my_counter = my_counter + 1 WHERE pk = 7; APPLY BATCH")

    # Tally's extras: SET, DELETE and use again, TTL, exactly-once ids.
    session.execute("UPDATE cf SET my_counter = 42 WHERE pk = 0")
    assert session.execute("SELECT my_counter FROM cf WHERE pk = 0").one().my_counter == 42
    session.execute("DELETE FROM cf WHERE pk = 0")
    assert session.execute("SELECT * FROM cf WHERE pk = 0").one() is None
    session.execute("UPDATE cf SET my_counter = my_counter + 2 WHERE pk = 0")
    assert session.execute("SELECT my_counter FROM cf WHERE pk = 0").one().my_counter == 2
    session.execute("UPDATE cf USING TTL 1 SET my_counter = my_counter + 1 WHERE pk = 9")
    assert session.execute("SELECT my_counter FROM cf WHERE pk = 9").one().my_counter == 1
    time.sleep(1.5)
    assert session.execute("SELECT * FROM cf WHERE pk = 9").one() is None
    op = {"tally-op-id": uuid.uuid4().bytes + struct.pack(">Q", 1)}
    for _ in range(3):
        session.execute(add, [5, 10], custom_payload=op)
    other = {"tally-op-id": op["tally-op-id"][:16] + struct.pack(">Q", 2)}
    session.execute(add, [5, 10], custom_payload=other)
    assert session.execute(get, [10]).one().my_counter == 10

    # A table with a composite partition key and clustering columns.
    session.execute(
        "CREATE TABLE views (site text, day date, page text, hits counter, bytes counter, "
        "PRIMARY KEY ((site, day), page)) WITH CLUSTERING ORDER BY (page DESC)"
    )
    hit = session.prepare(
        "UPDATE views SET hits = hits + 1, bytes = bytes + ? WHERE site = ? AND day = ? AND page = ?"
    )
    assert hit.routing_key_indexes == [1, 2], hit.routing_key_indexes
    day = date(2026, 11, 30)
    for page, n in [("a", 1), ("b", 2), ("c", 3), ("d", 4)]:
        for _ in range(n):
            session.execute(hit, [100, "tally.io", day, page])
    where = "WHERE site = 'tally.io' AND day = '2026-11-30'"
    rows = list(session.execute(f"SELECT page, hits, bytes FROM views {where}"))
    assert [(r.page, r.hits, r.bytes) for r in rows] == [
        ("d", 4, 400), ("c", 3, 300), ("b", 2, 200), ("a", 1, 100)], rows
    # One partition's rows, a page at a time.
    first = session.execute(SimpleStatement(f"SELECT page, hits FROM views {where}", fetch_size=3))
    assert first.has_more_pages and len(first.current_rows) == 3, first.current_rows
    assert [(r.page, r.hits) for r in first] == [("d", 4), ("c", 3), ("b", 2), ("a", 1)]
    rows = session.execute(f"SELECT page FROM views {where} AND page >= 'b' AND page < 'd' ORDER BY page ASC")
    assert [r.page for r in rows] == ["b", "c"]
    rows = session.execute(f"SELECT page, hits FROM views {where} AND page IN ('a', 'c') LIMIT 1")
    assert [(r.page, r.hits) for r in rows] == [("c", 3)]
    assert session.execute(f"SELECT COUNT(*) FROM views {where}").one().count == 4
    # At ALL: a read at ONE after a delete at ONE may reach the replica
    # the delete has not reached yet.
    session.execute(at(f"DELETE FROM views {where} AND page > 'b'", ConsistencyLevel.ALL))
    rows = session.execute(f"SELECT page FROM views {where}")
    assert [r.page for r in rows] == ["b", "a"]
    expect(InvalidRequest, "Some partition key parts are missing: day",
           "SELECT * FROM views WHERE site = 'tally.io'")
    expect(InvalidRequest, "Some clustering keys are missing: page",
           f"UPDATE views SET hits = hits + 1 {where}")

    # Levels: ALL while every node is up; ANY refused for counters.
    session.execute(at("UPDATE cf SET my_counter = my_counter + 1 WHERE pk = 50", ConsistencyLevel.ALL))
    assert session.execute(at("SELECT * FROM cf WHERE pk = 50", ConsistencyLevel.ALL)).one().my_counter == 1
    expect(InvalidRequest, "Consistency level ANY is not yet supported for counter table",
           at("UPDATE cf SET my_counter = my_counter + 1 WHERE pk = 50", ConsistencyLevel.ANY))

    # A SELECT of no partition scans the table, a page at a time.
    session.execute("CREATE TABLE scanned (pk int, ck int, c counter, PRIMARY KEY (pk, ck))")
    for pk in range(40):
        session.execute(f"UPDATE scanned SET c = c + {pk} WHERE pk = {pk} AND ck IN (1, 2)")
    session.execute("DELETE FROM scanned WHERE pk = 39")
    rows = list(session.execute(SimpleStatement("SELECT * FROM scanned", fetch_size=7)))
    assert sorted((r.pk, r.ck, r.c) for r in rows) == [
        (pk, ck, pk) for pk in range(39) for ck in (1, 2)], rows
    assert session.execute("SELECT COUNT(*) FROM scanned").one().count == 78
    assert len(list(session.execute("SELECT * FROM scanned LIMIT 5"))) == 5
    rows = session.execute("SELECT pk FROM scanned WHERE ck = 2 ALLOW FILTERING")
    assert sorted(r.pk for r in rows) == list(range(39))
    expect(InvalidRequest, "ALLOW FILTERING", "SELECT pk FROM scanned WHERE ck = 2")

    # TRUNCATE empties the table, which takes adds again.
    session.execute("TRUNCATE views")
    assert session.execute(f"SELECT * FROM views {where}").one() is None
    session.execute(hit, [1, "tally.io", day, "a"])
    assert session.execute(f"SELECT hits FROM views {where}").one().hits == 1
else:
    # The third node is down: QUORUM is served, ALL refused as Cassandra does.
    session.set_keyspace("ks")
    session.execute(at("UPDATE cf SET my_counter = my_counter + 1 WHERE pk = 50", ConsistencyLevel.QUORUM))
    row = session.execute(at("SELECT * FROM cf WHERE pk = 50", ConsistencyLevel.QUORUM)).one()
    assert row.my_counter == 2, row
    for statement in ["UPDATE cf SET my_counter = my_counter + 1 WHERE pk = 50", "SELECT * FROM cf WHERE pk = 50"]:
        try:
            session.execute(at(statement, ConsistencyLevel.ALL))
            raise AssertionError(f"{statement} answered at ALL")
        except Unavailable as e:
            assert e.consistency == ConsistencyLevel.ALL, e
            assert (e.required_replicas, e.alive_replicas) == (3, 2), e
    row = session.execute(at("SELECT * FROM cf WHERE pk = 50", ConsistencyLevel.ONE)).one()
    assert row.my_counter == 2, row
cluster.shutdown()
print("ok")
