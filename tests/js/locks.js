// npm's redlock and redis-semaphore's Mutex against a live Tally cluster,
// through ioredis, each lock's calls through a different node: acquire,
// a second client refused, extend, release, then the second takes it;
// an expired lock taken by the next client. Prints "ok".
'use strict';
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { default: Redlock } = require('redlock');
const { Mutex } = require('redis-semaphore');

const ports = process.argv[2].split(',').map(Number);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function redlock(cs) {
  // The cluster is one master to redlock, reached through any node.
  const rl = (i, opts) => new Redlock([cs[i % cs.length]], opts);
  const lock = await rl(0, { retryCount: 50, retryDelay: 50 }).acquire(['res'], 2000);
  assert.equal(await cs[1].get('res'), lock.value);
  await assert.rejects(rl(2, { retryCount: 0 }).acquire(['res'], 2000));
  const extended = await lock.extend(5000);
  const pttl = await cs[2].pttl('res');
  assert.ok(pttl > 4000 && pttl <= 5000, `pttl ${pttl}`);
  await extended.release();
  assert.equal(await cs[0].exists('res'), 0);
  const next = await rl(1, { retryCount: 0 }).acquire(['res'], 300);
  await sleep(500);
  assert.equal(await cs[2].exists('res'), 0, 'an expired lock is gone');
  await assert.rejects(next.release());
  const taken = await rl(2, { retryCount: 0 }).acquire(['res'], 2000);
  await taken.release();
}

async function mutex(cs) {
  const opts = { lockTimeout: 2000, acquireTimeout: 300, retryInterval: 20 };
  const first = new Mutex(cs[1], 'mtx', opts);
  await first.acquire();
  const second = new Mutex(cs[2], 'mtx', opts);
  assert.equal(await second.tryAcquire(), false);
  await first.release();
  assert.equal(await second.tryAcquire(), true);
  await second.release();
  assert.equal(await cs[0].exists('mutex:mtx'), 0);
}

(async () => {
  const cs = ports.map((port) => new Redis({ host: '127.0.0.1', port }));
  await redlock(cs);
  await mutex(cs);
  cs.forEach((c) => c.disconnect());
  console.log('ok');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
