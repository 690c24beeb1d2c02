# Events: a driver learns a joining node and another client's schema
# changes from the events Tally pushes. argv = CQL port. The test joins
# the fourth node once this prints "connected", and writes "joined".
import sys
import time

from cassandra.cluster import Cluster

port = int(sys.argv[1])
ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def waits(what, done, seconds=60):
    deadline = time.time() + seconds
    while not done():
        assert time.time() < deadline, f"{what} within {seconds} s"
        time.sleep(0.2)


cluster = Cluster(ips[:1], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
hosts = lambda: sorted(h.endpoint.address for h in cluster.metadata.all_hosts())
assert hosts() == ips, hosts()
print("connected", flush=True)
assert sys.stdin.readline().strip() == "joined"
# TOPOLOGY_CHANGE NEW_NODE: the driver reads system.peers again.
waits("the joined node", lambda: hosts() == ips + ["127.0.0.4"])
new = [h for h in cluster.metadata.all_hosts() if h.endpoint.address == "127.0.0.4"][0]
waits("the joined node up", lambda: new.is_up)

# SCHEMA_CHANGE: another client's keyspace and table show up in this
# driver's metadata without it asking.
other = Cluster(["127.0.0.2"], port=port, connect_timeout=10, control_connection_timeout=10)
s = other.connect()
s.execute("CREATE KEYSPACE pushed WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}")
s.execute("CREATE TABLE pushed.cf (pk int PRIMARY KEY, c counter)")
waits("the keyspace and table", lambda: "pushed" in cluster.metadata.keyspaces
      and "cf" in cluster.metadata.keyspaces["pushed"].tables)
s.execute("DROP TABLE pushed.cf")
waits("the table dropped", lambda: "cf" not in cluster.metadata.keyspaces["pushed"].tables)
other.shutdown()
cluster.shutdown()
print("ok", flush=True)
