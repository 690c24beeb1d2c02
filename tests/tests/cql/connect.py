# The Python cassandra-driver against a 3-node Tally: argv = CQL port, vnodes.
import sys

import time

from cassandra import InvalidRequest
from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.protocol import SyntaxException

port, vnodes = int(sys.argv[1]), int(sys.argv[2])
ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def on(session, host, query):
    """`query` run on `host`: the driver opens its pools to the hosts other
    than the contact point in the background, so a host may not take
    statements for a moment after connect."""
    for _ in range(100):
        try:
            return session.execute(query, host=host)
        except NoHostAvailable:
            time.sleep(0.1)
    return session.execute(query, host=host)

for contact in ips:
    # No protocol version given: the driver starts above v4 and steps down.
    cluster = Cluster([contact], port=port, connect_timeout=10, control_connection_timeout=10)
    session = cluster.connect()
    assert cluster.protocol_version == 4, cluster.protocol_version
    hosts = sorted(h.endpoint.address for h in cluster.metadata.all_hosts())
    assert hosts == ips, hosts
    assert all(h.is_up for h in cluster.metadata.all_hosts())
    meta = cluster.metadata
    assert meta.cluster_name == "test", meta.cluster_name
    assert meta.partitioner == "org.apache.cassandra.dht.Murmur3Partitioner", meta.partitioner
    assert len(meta.token_map.ring) == 3 * vnodes, len(meta.token_map.ring)
    assert set(meta.keyspaces) >= {"system", "system_schema"}, meta.keyspaces

    # Each node answers for itself: the node a statement is sent to.
    for host in meta.all_hosts():
        local = on(session, host, "SELECT cluster_name, rpc_address, release_version FROM system.local").one()
        assert local.cluster_name == "test" and local.release_version == "3.0.8", local
        assert local.rpc_address == host.endpoint.address, (local, host)
        peers = sorted(r.peer for r in on(session, host, "SELECT peer FROM system.peers"))
        assert peers == [ip for ip in ips if ip != host.endpoint.address], peers

    prepared = session.prepare(
        "SELECT keyspace_name, durable_writes FROM system_schema.keyspaces WHERE keyspace_name = ?"
    )
    rows = list(session.execute(prepared, ["system_schema"]))
    assert [(r.keyspace_name, r.durable_writes) for r in rows] == [("system_schema", True)], rows
    assert list(session.execute(prepared, ["nope"])) == []

    count = session.execute("SELECT COUNT(*) FROM system_schema.keyspaces").one()
    assert count.count == 2, count

    for statement, error, words in [
        ("SELECT * FROM ks.t", InvalidRequest, "Keyspace 'ks' does not exist"),
        ("UPDATE ks.cf SET c = c + 1 WHERE pk = 0", InvalidRequest, "does not exist"),
        ("SELEC * FROM system.local", SyntaxException, "mismatched input"),
        ("SELECT * FROM system.peers_v2", InvalidRequest, "unconfigured table peers_v2"),
    ]:
        try:
            session.execute(statement)
            raise AssertionError(f"{statement} answered")
        except error as e:
            assert words in str(e), (statement, e)
    session.set_keyspace("system")
    assert session.execute("SELECT key FROM local").one().key == "local"
    cluster.shutdown()

# The schema: agreed by the cluster, the same through every node.
from cassandra import AlreadyExists
from cassandra.protocol import ConfigurationException

cluster = Cluster([ips[0]], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
session.execute(
    "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}"
)
session.execute(
    "CREATE TABLE ks.views (site text, day date, page text, hits counter, "
    "PRIMARY KEY ((site, day), page)) WITH CLUSTERING ORDER BY (page DESC)"
)
session.execute("CREATE TABLE IF NOT EXISTS ks.views (k int PRIMARY KEY, c counter)")
assert cluster.metadata.keyspaces["ks"].replication_strategy.replication_factor == 3
table = cluster.metadata.keyspaces["ks"].tables["views"]
assert [c.name for c in table.partition_key] == ["site", "day"], table.partition_key
assert [c.name for c in table.clustering_key] == ["page"], table.clustering_key
assert table.clustering_key[0].is_reversed
assert table.columns["hits"].cql_type == "counter", table.columns["hits"].cql_type
assert table.is_cql_compatible
for statement, error in [
    ("CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}", AlreadyExists),
    ("CREATE TABLE ks.views (k int PRIMARY KEY, c counter)", AlreadyExists),
    ("CREATE KEYSPACE k2 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 2}", ConfigurationException),
    ("CREATE TABLE ks.mixed (k int PRIMARY KEY, c counter, v text)", InvalidRequest),
    ("UPDATE ks.nope SET c = c + 1 WHERE k = 0", InvalidRequest),
]:
    try:
        session.execute(statement)
        raise AssertionError(f"{statement} answered")
    except error:
        pass
# Through the other nodes, at once: the catalog is agreed, not gossiped.
versions = set()
for contact in ips:
    other = Cluster([contact], port=port, connect_timeout=10, control_connection_timeout=10)
    s = other.connect()
    assert "views" in other.metadata.keyspaces["ks"].tables, contact
    for host in other.metadata.all_hosts():
        versions.add(on(s, host, "SELECT schema_version FROM system.local").one().schema_version)
    other.shutdown()
assert len(versions) == 1, versions
session.execute("DROP TABLE ks.views")
session.execute("DROP TABLE IF EXISTS ks.views")
assert "views" not in cluster.metadata.keyspaces["ks"].tables
session.execute("DROP KEYSPACE ks")
assert "ks" not in cluster.metadata.keyspaces
cluster.shutdown()
print("ok")
