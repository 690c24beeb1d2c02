# A counter table's rows read as hashes over RESP (redis-py), the same
# cells CQL wrote. argv = CQL port, phase, then each node's RESP port:
# "write" (every node up: make the rows, read them through every node),
# "degraded" (the test killed the third node: add at QUORUM).
import sys

import redis
from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster
from cassandra.query import SimpleStatement

port, phase, resp_ports = int(sys.argv[1]), sys.argv[2], [int(p) for p in sys.argv[3:]]
cluster = Cluster(["127.0.0.1"], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
add = "UPDATE ks.votes SET hits = hits + %s WHERE poll = 'p' AND region = %s AND voter = 'v' AND day = '2026-11-30'"

if phase == "write":
    session.execute(
        "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute(
        'CREATE TABLE ks.votes (poll text, region int, voter text, day date, hits counter, '
        '"Other" counter, PRIMARY KEY ((poll, region), voter, day))'
    )
    row = "WHERE poll = 'it''s' AND region = 1 AND voter = %s AND day = %s"
    session.execute(f'UPDATE ks.votes SET hits = hits + 3, "Other" = "Other" + 1 {row}',
                    ["alice", "2026-11-30"])
    session.execute(f"UPDATE ks.votes SET hits = hits + 2 {row}", ["bob", "2026-11-29"])
    session.execute(f"UPDATE ks.votes SET hits = hits + 5 {row}", ["carol", "2026-11-28"])
    session.execute(f"DELETE FROM ks.votes {row}", ["carol", "2026-11-28"])
    for region in range(20):
        session.execute(add, [region + 1, region])

    name = b"\xffcql:ks.votes:'it''s',1"
    want = {
        b"'alice','2026-11-30':\"Other\"": b"1",
        b"'alice','2026-11-30':hits": b"3",
        b"'bob','2026-11-29':hits": b"2",
    }
    for p in resp_ports:
        r = redis.Redis(host="127.0.0.1", port=p)
        assert r.hgetall(name) == want, (p, r.hgetall(name))
        assert r.hlen(name) == 3
        assert r.hget(name, b"'bob','2026-11-29':hits") == b"2"
        assert r.hmget(name, [b"'alice','2026-11-30':hits", b"'bob','2026-11-29':\"Other\""]) == [b"3", None]
        assert r.hexists(name, b"'alice','2026-11-30':\"Other\"")
        assert r.hgetall(b"\xffcql:ks.votes:'p',7") == {b"'v','2026-11-30':hits": b"8"}
        assert r.hgetall(b"\xffcql:ks.votes:'nobody',7") == {}
        for wrong, words in [
            (lambda: r.hincrby(name, b"'bob','2026-11-29':hits", 1), "write it through CQL"),
            (lambda: r.hgetall(b"\xffcql:ks.nope:0"), "no table ks.nope"),
            (lambda: r.hgetall(b"\xffcql:ks.votes:1"), "partition key is 2 value(s)"),
            (lambda: r.hget(name, b"hits"), "a field of votes is its clustering values"),
        ]:
            try:
                wrong()
                raise AssertionError(words)
            except redis.ResponseError as e:
                assert words in str(e), e
else:
    quorum = SimpleStatement(add, consistency_level=ConsistencyLevel.QUORUM)
    for region in range(20):
        session.execute(quorum, [10, region])
cluster.shutdown()
print("ok")
