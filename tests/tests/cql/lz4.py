# LZ4 on the CQL port: with the `lz4` module installed, the Python driver
# asks for it at STARTUP and compresses its requests; Tally compresses
# its large answers. argv = CQL port.
import sys

from cassandra.cluster import Cluster

port = int(sys.argv[1])
cluster = Cluster(["127.0.0.1"], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
connection = cluster.control_connection._connection
assert connection.compressor is not None and connection.decompressor is not None, "no LZ4"
session.execute("CREATE KEYSPACE z WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}")
session.execute("CREATE TABLE z.wide (pk text, ck int, c counter, PRIMARY KEY (pk, ck))")
add = session.prepare("UPDATE z.wide SET c = c + ? WHERE pk = ? AND ck = ?")
name = "a partition key long enough that requests and answers are worth compressing " * 4
for ck in range(300):
    session.execute(add, [ck + 1, name, ck])
rows = list(session.execute("SELECT pk, ck, c FROM z.wide WHERE pk = %s", [name]))
assert [(r.pk, r.ck, r.c) for r in rows] == [(name, ck, ck + 1) for ck in range(300)], len(rows)
assert session.execute("SELECT COUNT(*) FROM z.wide").one().count == 300
cluster.shutdown()
print("ok")
