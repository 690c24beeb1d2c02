# Token-aware routing: 4 nodes at replication factor 1, so each partition
# has one replica. argv = CQL port, then each node's metrics address.
import sys
import urllib.request

from cassandra.cluster import Cluster

port, metrics = int(sys.argv[1]), sys.argv[2:]
ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]


def routed():
    """Statements on named partitions, cluster-wide, by route."""
    out = {"replica": 0, "forwarded": 0}
    for addr in metrics:
        text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith("tally_cql_statements_total{"):
                route = line.split('routed="')[1].split('"')[0]
                out[route] += int(float(line.split()[-1]))
    return out


cluster = Cluster(ips[:1], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
assert len(cluster.metadata.all_hosts()) == 4
session.execute(
    "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
)
session.execute("CREATE TABLE ks.cf (pk text PRIMARY KEY, c counter)")
add = session.prepare("UPDATE ks.cf SET c = c + 1 WHERE pk = ?")
get = session.prepare("SELECT c FROM ks.cf WHERE pk = ?")
before = routed()
keys = [f"key-{i}" for i in range(200)]
for k in keys:
    session.execute(add, [k])
for k in keys:
    assert session.execute(get, [k]).one().c == 1, k
after = routed()
# Every prepared statement went straight to the partition's one replica,
# which the driver computed from Tally's tokens as Tally does.
assert after["replica"] - before["replica"] == 400, (before, after)
assert after["forwarded"] == before["forwarded"], (before, after)
# Spread over the nodes: each is the replica of some keys.
owners = {str(cluster.metadata.get_replicas("ks", add.bind([k]).routing_key)[0].endpoint.address) for k in keys}
assert owners == set(ips), owners
cluster.shutdown()
print("ok")
