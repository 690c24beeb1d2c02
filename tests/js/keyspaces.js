// ioredis against a live cluster: scanStream over 2,000 keys in each of
// three databases lists each key of its database exactly once; FLUSHDB of
// one leaves the others; a defined command runs by EVALSHA.
'use strict';
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const port = Number(process.argv[2]);
const N = 2000;
const DBS = [0, 3, 7];

async function scanAll(c) {
  const seen = [];
  await new Promise((resolve, reject) => {
    const s = c.scanStream({ count: 100 });
    s.on('data', (keys) => seen.push(...keys));
    s.on('end', resolve);
    s.on('error', reject);
  });
  return seen;
}

(async () => {
  const conns = Object.fromEntries(DBS.map((db) => [db, new Redis({ host: '127.0.0.1', port, db })]));
  for (const db of DBS) {
    const p = conns[db].pipeline();
    for (let i = 0; i < N; i++) p.incrby(`io${db}:${i}`, i + 1);
    const done = await p.exec();
    assert.equal(done.filter(([e]) => e).length, 0);
  }
  for (const db of DBS) {
    const seen = await scanAll(conns[db]);
    assert.equal(seen.length, N, `db ${db}: ${seen.length} keys listed`);
    assert.equal(new Set(seen).size, N, `db ${db}: a key listed twice`);
    assert.ok(seen.every((k) => k.startsWith(`io${db}:`)), `db ${db}: another database's key`);
  }
  assert.equal(await conns[3].flushdb(), 'OK');
  assert.equal((await scanAll(conns[3])).length, 0);
  assert.equal(await conns[0].dbsize(), N);
  assert.equal(await conns[0].get('io0:9'), '10');
  conns[0].defineCommand('addTwice', { numberOfKeys: 1, lua: "redis.call('INCRBY', KEYS[1], ARGV[1]) return redis.call('INCRBY', KEYS[1], ARGV[1])" });
  assert.equal(await conns[0].addTwice('twice', 3), 6);
  assert.equal(await conns[0].addTwice('twice', 1), 8);
  for (const c of Object.values(conns)) c.disconnect();
  console.log('ok');
})().catch((e) => { console.error(e); process.exit(1); });
