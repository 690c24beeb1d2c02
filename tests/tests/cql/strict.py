# Strict: a cluster with [cluster.cql] strict = true refuses what
# Cassandra refuses of counters, with Cassandra's words. argv = CQL port.
import sys

from cassandra import InvalidRequest
from cassandra.cluster import Cluster

port = int(sys.argv[1])
cluster = Cluster(["127.0.0.1"], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
session.execute("CREATE KEYSPACE s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
session.execute("CREATE TABLE s.cf (pk int PRIMARY KEY, c counter)")
for statement, words in [
    ("UPDATE s.cf SET c = 5 WHERE pk = 1", "Cannot set the value of counter column c"),
    ("UPDATE s.cf USING TTL 9 SET c = c + 1 WHERE pk = 1", "Cannot provide custom TTL for counter updates"),
    ("CREATE TABLE s.t (pk int PRIMARY KEY, c counter) WITH default_time_to_live = 9",
     "Cannot set default_time_to_live on a table with counters"),
]:
    try:
        session.execute(statement)
        raise AssertionError(f"{statement} answered")
    except InvalidRequest as e:
        assert words in str(e), (statement, e)
session.execute("UPDATE s.cf SET c = c + 2 WHERE pk = 1")
assert session.execute("SELECT c FROM s.cf WHERE pk = 1").one().c == 2
cluster.shutdown()
print("ok")
