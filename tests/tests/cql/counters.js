// The Node.js cassandra-driver against a 3-node Tally: argv = CQL port.
// Its defaults: token-aware routing in the local data center, which it
// must be told; prepared statements; a counter batch.
const cassandra = require('cassandra-driver');

const port = Number(process.argv[2]);
const assert = (ok, what) => {
  if (!ok) throw new Error(what);
};

async function main() {
  const client = new cassandra.Client({
    contactPoints: ['127.0.0.1'],
    protocolOptions: { port },
    localDataCenter: 'datacenter1',
  });
  await client.connect();
  const hosts = client.hosts.values().map((h) => h.address).sort();
  assert(hosts.length === 3, `hosts ${hosts}`);
  assert(client.getState().getConnectedHosts().length >= 1, 'connected');
  await client.execute(
    "CREATE KEYSPACE js WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}");
  await client.execute('CREATE TABLE js.views (page text, day date, hits counter, PRIMARY KEY (page, day))');
  const add = 'UPDATE js.views SET hits = hits + ? WHERE page = ? AND day = ?';
  const day = cassandra.types.LocalDate.fromString('2026-11-30');
  for (let i = 0; i < 20; i++) {
    await client.execute(add, [cassandra.types.Long.fromNumber(2), `p${i % 4}`, day], { prepare: true });
  }
  // Token-aware: the replicas the driver computes hold the partition.
  const replicas = client.getReplicas('js', Buffer.from('p0'));
  assert(replicas.length === 3, `replicas ${replicas.length}`);
  await client.batch([
    { query: add, params: [cassandra.types.Long.fromNumber(10), 'p0', day] },
    { query: add, params: [cassandra.types.Long.fromNumber(-1), 'p1', day] },
  ], { prepare: true, counter: true });
  const get = 'SELECT page, day, hits FROM js.views WHERE page = ?';
  const rows = [];
  for (const page of ['p0', 'p1', 'p2', 'p3']) {
    const r = await client.execute(get, [page], { prepare: true });
    rows.push(...r.rows.map((row) => `${row.page} ${row.day} ${row.hits}`));
  }
  const want = ['p0 2026-11-30 20', 'p1 2026-11-30 9', 'p2 2026-11-30 10', 'p3 2026-11-30 10'];
  assert(JSON.stringify(rows) === JSON.stringify(want), `rows ${rows}`);
  // Paged, through eachRow's pages.
  let seen = 0;
  const all = await client.execute('SELECT * FROM js.views', [], { fetchSize: 2 });
  seen += all.rows.length;
  let page = all;
  while (page.pageState) {
    page = await client.execute('SELECT * FROM js.views', [], { fetchSize: 2, pageState: page.pageState });
    seen += page.rows.length;
  }
  assert(seen === 4, `scanned ${seen}`);
  await client.shutdown();
  console.log('ok');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
