# TOKEN() ranges and scans in token order through the Python driver
# against a 3-node Tally: a full scan pages through every row in token
# order (the driver's own Murmur3 tokens), a hand-written pager by
# token(k) > last, the ring's ranges from the driver's token map (as
# Spark-style readers split a table), and a LIMIT counted across pages.
# argv = CQL port.
import sys

from cassandra import InvalidRequest
from cassandra.cluster import Cluster
from cassandra.query import SimpleStatement

port = int(sys.argv[1])
cluster = Cluster(["127.0.0.1"], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
session.execute(
    "CREATE KEYSPACE tk WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
)
session.execute("CREATE TABLE tk.events (site text, day int, seq int, v text, "
                "PRIMARY KEY ((site, day), seq))")
insert = session.prepare("INSERT INTO tk.events (site, day, seq, v) VALUES (?, ?, ?, ?)")
token_class = cluster.metadata.token_map.token_class
tokens = {}
for i in range(200):
    for seq in range(2):
        bound = insert.bind([f"s{i % 7}", i, seq, f"v{i}-{seq}"])
        session.execute(bound)
    tokens[(f"s{i % 7}", i)] = token_class.from_key(bound.routing_key).value


def expect(words, query, *args):
    try:
        session.execute(query, *args)
    except InvalidRequest as e:
        assert words in str(e), (query, e)
        return
    raise AssertionError(f"{query} answered")


# A full scan, 30 rows a page: every row once, partitions in token order.
scan = SimpleStatement("SELECT site, day, seq FROM tk.events", fetch_size=30)
rows = [(r.site, r.day, r.seq) for r in session.execute(scan)]
assert len(rows) == 400 and len(set(rows)) == 400, len(rows)
order = [tokens[(s, d)] for s, d, _ in rows]
assert order == sorted(order), "partitions in token order"

# token(pk) of the row itself, and = token(values).
first = session.execute(
    "SELECT site, day FROM tk.events WHERE token(site, day) = token('s3', 10)").all()
assert [(r.site, r.day) for r in first] == [("s3", 10), ("s3", 10)], first

# A hand-written pager: token(site, day) > the last token seen.
seen, last = [], None
while True:
    where = "" if last is None else f" WHERE token(site, day) > {last}"
    page = session.execute(f"SELECT DISTINCT site, day FROM tk.events{where} LIMIT 17").all()
    if not page:
        break
    assert len(page) <= 17
    seen += [(r.site, r.day) for r in page]
    last = tokens[seen[-1]]
assert sorted(seen) == sorted(tokens), "every partition once"

# The ring's ranges, as Spark-style readers split it: each partition in
# exactly one range, bound by markers.
ranges = session.prepare(
    "SELECT site, day, seq FROM tk.events WHERE token(site, day) > ? AND token(site, day) <= ?")
assert [c.name for c in ranges.column_metadata] == ["partition key token"] * 2
ring = sorted(t.value for t in cluster.metadata.token_map.ring)
bounds = [-2**63] + ring + [2**63 - 1]
got = []
for lo, hi in zip(bounds, bounds[1:]):
    part = [(r.site, r.day, r.seq) for r in session.execute(ranges, [lo, hi])]
    assert all(lo < tokens[(s, d)] <= hi for s, d, _ in part), (lo, hi)
    got += part
assert sorted(got) == sorted(rows), (len(got), len(rows))
assert session.execute(ranges, [10, -10]).all() == [], "no wrapping around the ring"

# token() as a selector: the column a pager goes on from.
with_token = session.execute(
    "SELECT site, day, token(site, day) FROM tk.events WHERE token(site, day) > 0 LIMIT 5").all()
assert len(with_token) == 5
for r in with_token:
    assert r[2] == tokens[(r.site, r.day)] and r[2] > 0, r
assert session.execute("SELECT token(site, day) FROM tk.events LIMIT 1").column_names == [
    "system.token(site, day)"]
expect("token() takes the partition key", "SELECT token(day) FROM tk.events")

# A LIMIT counts across pages.
limited = SimpleStatement("SELECT seq FROM tk.events LIMIT 75", fetch_size=20)
assert len(list(session.execute(limited))) == 75
within = SimpleStatement("SELECT seq FROM tk.events WHERE token(site, day) > 0 LIMIT 9",
                         fetch_size=4)
assert len(list(session.execute(within))) == 9

expect("must be in the partition key order",
       "SELECT * FROM tk.events WHERE token(day, site) > 0")
expect("all partition key components", "SELECT * FROM tk.events WHERE token(site) > 0")
expect("cannot be restricted by both a normal relation and a token relation",
       "SELECT * FROM tk.events WHERE site = 'x' AND day = 1 AND token(site, day) > 0")
expect("start bound", "SELECT * FROM tk.events WHERE token(site, day) > 0 AND token(site, day) > 1")
cluster.shutdown()
print("ok")
