// rate-limiter-flexible (RateLimiterRedis) and rate-limit-redis (through
// express-rate-limit, in a real express server) against a live Tally
// cluster, through ioredis: N requests allowed, the N+1st refused, allowed
// again after the window; through one node, then through a different node
// each time (those connections at CLIENT CONSISTENCY ALL: an INCR led by
// one node is then seen by every other before it is answered).
'use strict';
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const { RedisStore } = require('rate-limit-redis');

const ports = process.argv[2].split(',').map(Number);
const LIMIT = 5;
// Six requests must fit in a window even on a slow host.
const WINDOW_MS = 3000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(port, all) {
  const c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 2 });
  if (all) assert.equal(await c.call('CLIENT', 'CONSISTENCY', 'ALL'), 'OK');
  return c;
}

async function flexible(clients, name) {
  const limiters = clients.map((c) => new RateLimiterRedis({
    storeClient: c, points: LIMIT, duration: WINDOW_MS / 1000, keyPrefix: name,
  }));
  const at = (i) => limiters[i % limiters.length];
  for (let i = 0; i < LIMIT; i++) {
    const r = await at(i).consume('user');
    assert.equal(r.remainingPoints, LIMIT - i - 1, `${name}: request ${i + 1}`);
  }
  await assert.rejects(at(LIMIT).consume('user'), (r) => r.remainingPoints === 0 && r.msBeforeNext > 0,
    `${name}: request ${LIMIT + 1} was allowed`);
  await sleep(WINDOW_MS + 300);
  assert.equal((await at(LIMIT + 1).consume('user')).remainingPoints, LIMIT - 1, `${name}: after the window`);
}

async function expressLimit(clients, name) {
  let turn = 0;
  const sendCommand = (command, ...args) => clients[turn++ % clients.length].call(command, ...args);
  const app = express();
  app.use(rateLimit({
    windowMs: WINDOW_MS, limit: LIMIT, standardHeaders: 'draft-8', legacyHeaders: false,
    store: new RedisStore({ prefix: `${name}:`, sendCommand }),
  }));
  app.get('/', (req, res) => res.send('ok'));
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  const url = `http://127.0.0.1:${server.address().port}/`;
  try {
    for (let i = 0; i < LIMIT; i++) assert.equal((await fetch(url)).status, 200, `${name}: request ${i + 1}`);
    assert.equal((await fetch(url)).status, 429, `${name}: request ${LIMIT + 1} was allowed`);
    await sleep(WINDOW_MS + 300);
    assert.equal((await fetch(url)).status, 200, `${name}: after the window`);
  } finally {
    server.close();
  }
}

(async () => {
  const one = [await connect(ports[0], false)];
  const each = await Promise.all(ports.map((p) => connect(p, true)));
  await flexible(one, 'flex-one');
  await flexible(each, 'flex-each');
  await expressLimit(one, 'express-one');
  await expressLimit(each, 'express-each');
  for (const c of [...one, ...each]) c.disconnect();
  console.log('ok');
})().catch((e) => { console.error(e); process.exit(1); });
