// npm's redlock and redis-semaphore's Mutex, Semaphore and MultiSemaphore
// against a live Tally cluster, through ioredis, each lock's calls through
// a different node: acquire, a second client refused, extend, release,
// then the second takes it; an expired lock taken by the next client;
// semaphores (a sorted set, changed by scripts) that admit their limit
// and no more, while holders refresh and release. Prints "ok".
'use strict';
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { default: Redlock } = require('redlock');
const { Mutex, Semaphore, MultiSemaphore } = require('redis-semaphore');

const ports = process.argv[2].split(',').map(Number);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function redlock(cs) {
  // The cluster is one master to redlock, reached through any node.
  const rl = (i, opts) => new Redlock([cs[i % cs.length]], opts);
  const lock = await rl(0, { retryCount: 50, retryDelay: 50 }).acquire(['res'], 20000);
  assert.equal(await cs[1].get('res'), lock.value);
  await assert.rejects(rl(2, { retryCount: 0 }).acquire(['res'], 20000));
  const extended = await lock.extend(50000);
  const pttl = await cs[2].pttl('res');
  assert.ok(pttl > 40000 && pttl <= 50000, `pttl ${pttl}`);
  await extended.release();
  assert.equal(await cs[0].exists('res'), 0);
  const next = await rl(1, { retryCount: 0 }).acquire(['res'], 1000);
  await sleep(1300);
  assert.equal(await cs[2].exists('res'), 0, 'an expired lock is gone');
  await assert.rejects(next.release());
  const taken = await rl(2, { retryCount: 0 }).acquire(['res'], 20000);
  await taken.release();
}

async function mutex(cs) {
  const opts = { lockTimeout: 20000, acquireTimeout: 1000, retryInterval: 20 };
  const first = new Mutex(cs[1], 'mtx', opts);
  await first.acquire();
  const second = new Mutex(cs[2], 'mtx', opts);
  assert.equal(await second.tryAcquire(), false);
  await first.release();
  assert.equal(await second.tryAcquire(), true);
  await second.release();
  assert.equal(await cs[0].exists('mutex:mtx'), 0);
}

async function semaphore(cs) {
  const opts = { lockTimeout: 20000, acquireTimeout: 1000, retryInterval: 20 };
  const sem = (i) => new Semaphore(cs[i % cs.length], 'sem', 2, opts);
  // Two permits, taken through two nodes; a third is refused.
  const [a, b, c] = [sem(0), sem(1), sem(2)];
  await a.acquire();
  await b.acquire();
  assert.equal(await c.tryAcquire(), false);
  assert.equal(await cs[2].zcard('semaphore:sem'), 2);
  assert.equal(await cs[0].type('semaphore:sem'), 'zset');
  const pttl = await cs[1].pttl('semaphore:sem');
  assert.ok(pttl > 10000 && pttl <= 20000, `pttl ${pttl}`);
  // A release through another node frees a permit for the third.
  await a.release();
  assert.equal(await c.tryAcquire(), true);
  assert.deepEqual(
    (await cs[0].zrange('semaphore:sem', 0, -1)).sort(),
    [b.identifier, c.identifier].sort()
  );
  await b.release();
  await c.release();
  assert.equal(await cs[1].exists('semaphore:sem'), 0, 'the last release empties it');

  // Holders that stop refreshing lose their permits when they expire.
  // (A refused `tryAcquire` retries for `acquireTimeout`, well within
  // the holder's `lockTimeout`.)
  const short = { lockTimeout: 3000, acquireTimeout: 300, retryInterval: 20, refreshInterval: 0 };
  const gone = new Semaphore(cs[0], 'sem2', 1, short);
  await gone.acquire();
  assert.equal(await new Semaphore(cs[1], 'sem2', 1, short).tryAcquire(), false);
  await sleep(3300);
  const next = new Semaphore(cs[2], 'sem2', 1, short);
  assert.equal(await next.tryAcquire(), true, 'an expired permit is taken');
  await next.release();

  // Ten holders racing for three permits through all nodes: never more
  // than three at once, and each gets its turn.
  let inside = 0;
  let most = 0;
  const race = { lockTimeout: 30000, acquireTimeout: 30000, retryInterval: 10 };
  await Promise.all(
    [...Array(10).keys()].map(async (i) => {
      const s = new Semaphore(cs[i % cs.length], 'race', 3, race);
      await s.acquire();
      inside += 1;
      most = Math.max(most, inside);
      await sleep(30);
      inside -= 1;
      await s.release();
    })
  );
  assert.ok(most <= 3 && most >= 1, `at most three at once, saw ${most}`);
}

async function multiSemaphore(cs) {
  const opts = { lockTimeout: 20000, acquireTimeout: 1000, retryInterval: 20 };
  // Five permits: three and two taken through two nodes; one more refused.
  const a = new MultiSemaphore(cs[0], 'multi', 5, 3, opts);
  const b = new MultiSemaphore(cs[1], 'multi', 5, 2, opts);
  const c = new MultiSemaphore(cs[2], 'multi', 5, 1, opts);
  await a.acquire();
  await b.acquire();
  assert.equal(await c.tryAcquire(), false);
  assert.equal(await cs[2].zcard('semaphore:multi'), 5);
  await a.release();
  assert.equal(await cs[0].zcard('semaphore:multi'), 2);
  assert.equal(await c.tryAcquire(), true);
  await b.release();
  await c.release();
  assert.equal(await cs[1].exists('semaphore:multi'), 0);
}

(async () => {
  const cs = ports.map((port) => new Redis({ host: '127.0.0.1', port }));
  await redlock(cs);
  await mutex(cs);
  await semaphore(cs);
  await multiSemaphore(cs);
  cs.forEach((c) => c.disconnect());
  console.log('ok');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
