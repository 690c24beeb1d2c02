# The Python driver over TLS with PlainTextAuthProvider, against a 3-node
# Tally with users: argv = CQL port, the cluster CA's file.
import ssl
import sys
import time

from cassandra import AuthenticationFailed, Unauthorized
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster, NoHostAvailable

port, ca = int(sys.argv[1]), sys.argv[2]


def connect(user, password, tls=True):
    context = None
    if tls:
        context = ssl.create_default_context(cafile=ca)
    cluster = Cluster(["127.0.0.1"], port=port, ssl_context=context,
                      auth_provider=PlainTextAuthProvider(user, password),
                      connect_timeout=10, control_connection_timeout=10)
    return cluster, cluster.connect()


def refused(user, password, tls=True):
    try:
        connect(user, password, tls)
    except NoHostAvailable as e:
        return e
    raise AssertionError(f"{user} got in")


# A wrong password, and a client without TLS, are turned away.
e = refused("app", "wrong")
assert any(isinstance(x, AuthenticationFailed) for x in e.errors.values()), e
refused("app", "app-pw", tls=False)

admin, session = connect("admin", "admin-pw")
assert len(admin.metadata.all_hosts()) == 3
for attempt in range(100):
    try:
        session.execute("CREATE KEYSPACE ks WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 3}")
        break
    except Exception as e:  # agreement is enabled a heartbeat after the feature
        assert "not enabled" in str(e), e
        time.sleep(0.1)
session.execute("CREATE TABLE ks.cf (pk int PRIMARY KEY, c counter)")

app, s = connect("app", "app-pw")
s.execute("UPDATE ks.cf SET c = c + 3 WHERE pk = 1")
assert s.execute("SELECT c FROM ks.cf WHERE pk = 1").one().c == 3
try:
    s.execute("CREATE TABLE ks.other (pk int PRIMARY KEY, c counter)")
    raise AssertionError("readwrite made a table")
except Unauthorized as e:
    assert "has no CREATE permission" in str(e), e

viewer, v = connect("viewer", "viewer-pw")
assert v.execute("SELECT c FROM ks.cf WHERE pk = 1").one().c == 3
try:
    v.execute("UPDATE ks.cf SET c = c + 1 WHERE pk = 1")
    raise AssertionError("readonly wrote")
except Unauthorized as e:
    assert "User viewer has no MODIFY permission on <table ks.cf>" in str(e), e
for c in (admin, app, viewer):
    c.shutdown()
print("ok")
