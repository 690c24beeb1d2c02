# Exactly-once adds through a Python driver while a node loses answers:
# n1 (tallyd-faults --cql-drop-answers-every) closes the connection instead
# of answering some of the adds it applied, and the driver retries them on
# the next host. argv = CQL port.
import struct
import sys
import time
import uuid

from cassandra.cluster import Cluster

port = int(sys.argv[1])
ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
KEYS, ADDS = 30, 300

cluster = Cluster(ips[:1], port=port, connect_timeout=10, control_connection_timeout=10)
session = cluster.connect()
session.execute("CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}")
session.execute("CREATE TABLE ks.cf (pk int PRIMARY KEY, c counter)")
add = session.prepare("UPDATE ks.cf SET c = c + 1 WHERE pk = ?")
add.is_idempotent = True  # safe to retry: with an id, applied once
total = session.prepare("SELECT c FROM ks.cf WHERE pk IN ?")


def run(base, with_ids):
    client = uuid.uuid4().bytes
    for seq in range(1, ADDS + 1):
        payload = {"tally-op-id": client + struct.pack(">Q", seq)} if with_ids else None
        for attempt in range(50):  # while every host is down for a moment
            try:
                session.execute(add, [base + seq % KEYS], custom_payload=payload)
                break
            except Exception as e:
                assert "NoHostAvailable" in type(e).__name__, e
                time.sleep(0.1)
        time.sleep(0.002)
    rows = session.execute(total, [[base + k for k in range(KEYS)]])
    return sum(r.c for r in rows)


def wait_for_n1():
    """The driver marks n1 down when it closes a connection, and sends
    nothing to it until it has reconnected (a second or more)."""
    for _ in range(300):
        if any(h.address == ips[0] and h.is_up for h in cluster.metadata.all_hosts()):
            return
        time.sleep(0.1)
    raise AssertionError("the driver did not reconnect to n1 in 30 s")


exact = run(0, True)
assert exact == ADDS, f"with ids: {exact} counted of {ADDS} adds"
# The same without ids: the adds whose answers were lost count twice.
wait_for_n1()
over = run(1000, False)
assert over > ADDS, f"without ids: {over} of {ADDS}: no answer was lost"
print(f"with ids {exact} of {ADDS}; without {over}", file=sys.stderr)
print("ok", flush=True)
cluster.shutdown()
