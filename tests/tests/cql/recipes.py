# The counting recipes (tests/cql/recipes/*.cql) through the Python
# cassandra-driver: each statement run as cqlsh runs it (its CONSISTENCY
# and SERIAL CONSISTENCY too), and every result compared with the table
# cqlsh printed for Cassandra (the .out beside each script), cell by cell.
# Like cqlsh, every statement goes through the one node it connected to: at
# ONE, a row written through one node may not be on the replica a read
# through another node asks first.
# argv = CQL port, then the recipes' paths without their suffix.
import datetime
import sys
import uuid

from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster
from cassandra.policies import WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement

port, recipes = int(sys.argv[1]), sys.argv[2:]
cluster = Cluster(
    ["127.0.0.1"],
    port=port,
    load_balancing_policy=WhiteListRoundRobinPolicy(["127.0.0.1"]),
    connect_timeout=10,
    control_connection_timeout=10,
)
session = cluster.connect()


def statements(text):
    """The script's statements, a batch whole, comments left out."""
    out, current = [], []
    for line in text.splitlines():
        if line.strip().startswith("--") or not line.strip():
            continue
        current.append(line)
        joined = " ".join(current)
        in_batch = joined.upper().lstrip().startswith("BEGIN") and "APPLY BATCH" not in joined.upper()
        if line.rstrip().endswith(";") and not in_batch:
            out.append(joined.strip().rstrip(";"))
            current = []
    return out


def printed(value):
    """A value as cqlsh 6.2.2 prints it."""
    if value is None:
        return "null"
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f") + "+0000"
    return str(value)


def tables(text):
    """The result tables cqlsh printed: each header's columns and rows."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines[:-1]):
        sep = lines[i + 1]
        if sep and set(sep) <= set("-+") and line.strip():
            rows = []
            for row in lines[i + 2:]:
                if not row.strip() or row.startswith(("Consistency level", "Serial consistency")):
                    break
                rows.append([c.strip() for c in row.split("|")])
            out.append(([c.strip() for c in line.split("|")], rows))
    return out


for recipe in recipes:
    level, serial = ConsistencyLevel.ONE, ConsistencyLevel.SERIAL
    got = []
    for s in statements(open(recipe + ".cql").read()):
        words = s.upper().split()
        if words[:2] == ["SERIAL", "CONSISTENCY"]:
            serial = getattr(ConsistencyLevel, words[2])
            continue
        if words[0] == "CONSISTENCY":
            level = getattr(ConsistencyLevel, words[1])
            continue
        if words[0] == "USE":
            session.set_keyspace(s.split()[1])
            continue
        statement = SimpleStatement(s, consistency_level=level, serial_consistency_level=serial)
        result = session.execute(statement)
        if result.column_names and (words[0] == "SELECT" or " IF " in f" {s.upper()} "):
            rows = [[printed(v) for v in row] for row in result.current_rows]
            got.append((list(result.column_names), rows))
    want = tables(open(recipe + ".out").read())
    assert got == want, (recipe, got, want)
cluster.shutdown()
print("ok")
