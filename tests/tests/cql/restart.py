# The schema and the counters survive every node's restart. argv = CQL
# port, phase: "before" (make them), then "after" (the test killed and
# restarted every node in between).
import sys
import time

from cassandra.cluster import Cluster, NoHostAvailable

port, phase = int(sys.argv[1]), sys.argv[2]
for attempt in range(100):
    try:
        cluster = Cluster(["127.0.0.2"], port=port, connect_timeout=10, control_connection_timeout=10)
        session = cluster.connect()
        break
    except NoHostAvailable:
        time.sleep(0.2)
add = "UPDATE kept.cf SET c = c + 1 WHERE pk = %s AND ck = %s"
if phase == "before":
    session.execute("CREATE KEYSPACE kept WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}")
    session.execute("CREATE TABLE kept.cf (pk int, ck text, c counter, PRIMARY KEY (pk, ck)) "
                    "WITH CLUSTERING ORDER BY (ck DESC)")
    for pk in range(5):
        session.execute(add, [pk, "a"])
else:
    table = cluster.metadata.keyspaces["kept"].tables["cf"]
    assert table.clustering_key[0].is_reversed, "the clustering order kept"
    for attempt in range(100):  # statements on rows wait for the cluster feature
        try:
            session.execute(add, [0, "b"])
            break
        except Exception as e:
            assert "not enabled" in str(e), e
            time.sleep(0.2)
    rows = [(r.pk, r.ck, r.c) for pk in range(5) for r in session.execute("SELECT * FROM kept.cf WHERE pk = %s", [pk])]
    assert rows == [(0, "b", 1), (0, "a", 1)] + [(pk, "a", 1) for pk in range(1, 5)], rows
cluster.shutdown()
print("ok")
