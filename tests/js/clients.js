// node-redis and ioredis against one Tally node: both open with RESP3 (their
// default), then counters, a pipeline and a MULTI/EXEC transaction, and
// counters set and expired as in Redis (SET EX/NX, EXPIRE, TTL, PERSIST).
// Usage: NODE_PATH=.../node_modules node clients.js PORT (see node_clients.rs)
const assert = require("node:assert/strict");
const { createClient } = require("redis");
const Redis = require("ioredis");
const port = Number(process.argv[2]);
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

async function nodeRedis() {
  const c = createClient({ url: `redis://127.0.0.1:${port}` });
  c.on("error", (e) => { throw e; });
  await c.connect();
  const p = `nr${Date.now()}:`;
  assert.match(String(await c.sendCommand(["CLIENT", "INFO"])), / resp=3 /);
  assert.equal(await c.ping(), "PONG");
  assert.equal(await c.incr(p + "a"), 1);
  assert.equal(await c.incrBy(p + "a", 41), 42);
  assert.equal(await c.get(p + "a"), "42");
  assert.equal(await c.get(p + "never"), null);
  assert.deepEqual(await c.mGet([p + "a", p + "never"]), ["42", null]);
  assert.equal(await c.hIncrBy(p + "h", "likes", 3), 3);
  assert.deepEqual({ ...(await c.hGetAll(p + "h")) }, { likes: "3" });
  const piped = await Promise.all(Array.from({ length: 50 }, () => c.incr(p + "pipe")));
  assert.deepEqual(piped, Array.from({ length: 50 }, (_, i) => i + 1));
  assert.deepEqual(await c.multi().incr(p + "p2").get(p + "p2").execAsPipeline(), [1, "1"]);
  assert.deepEqual(await c.multi().incr(p + "tx").incrBy(p + "tx", 9).get(p + "tx").exec(), [1, 10, "10"]);
  assert.equal(await c.del(p + "a"), 1);
  assert.equal(await c.get(p + "a"), null);
  // Settable, expiring counters.
  const s = p + "s", ex100 = { expiration: { type: "EX", value: 100 } };
  assert.equal(await c.set(s, "5", ex100), "OK");
  assert.ok((await c.ttl(s)) >= 99);
  assert.equal(await c.set(s, "7", { condition: "NX" }), null);
  assert.equal(await c.set(p + "new", "1", { condition: "NX" }), "OK");
  assert.equal(await c.incr(s), 6);
  assert.ok((await c.ttl(s)) > 0, "INCR keeps the TTL");
  assert.equal(await c.persist(s), 1);
  assert.equal(await c.ttl(s), -1);
  assert.equal(await c.expire(s, 100), 1);
  assert.equal(await c.ttl(p + "never"), -2);
  assert.equal(await c.pExpire(s, 300), 1);
  await sleep(500);
  assert.equal(await c.get(s), null);
  assert.equal(await c.incr(s), 1, "an expired counter restarts from 0");
  assert.equal(await c.ttl(s), -1);
  assert.equal(await c.set(s, "abc"), "OK", "a SET replaces a counter, as in Redis");
  assert.equal(await c.get(s), "abc");
  assert.deepEqual(
    await c.multi().set(p + "ps", "5", ex100).incr(p + "ps").ttl(p + "ps").execAsPipeline(),
    ["OK", 6, 100]);
  assert.deepEqual(
    await c.multi().set(p + "ts", "5").expire(p + "ts", 100).ttl(p + "ts").exec(),
    ["OK", 1, 100]);
  c.destroy();
}

async function ioRedis() {
  const r = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0 });
  await r.connect();
  const p = `io${Date.now()}:`;
  assert.match(String(await r.call("CLIENT", "INFO")), / resp=3 /);
  assert.equal(await r.incr(p + "a"), 1);
  assert.equal(await r.incrby(p + "a", 41), 42);
  assert.equal(await r.get(p + "a"), "42");
  assert.deepEqual(await r.mget(p + "a", p + "never"), ["42", null]);
  assert.equal(await r.hincrby(p + "h", "likes", 3), 3);
  assert.deepEqual(await r.hgetall(p + "h"), { likes: "3" });
  const piped = await r.pipeline().incr(p + "pipe").incr(p + "pipe").get(p + "pipe").exec();
  assert.deepEqual(piped, [[null, 1], [null, 2], [null, "2"]]);
  const tx = await r.multi().incr(p + "tx").incrby(p + "tx", 9).get(p + "tx").exec();
  assert.deepEqual(tx, [[null, 1], [null, 10], [null, "10"]]);
  await assert.rejects(r.multi().incr(p + "tx").call("INCR").exec(), /EXECABORT|wrong number/);
  assert.equal(await r.get(p + "tx"), "10");
  // Settable, expiring counters.
  const s = p + "s";
  assert.equal(await r.set(s, 5, "EX", 100), "OK");
  assert.ok((await r.ttl(s)) >= 99);
  assert.equal(await r.set(s, 7, "NX"), null);
  assert.equal(await r.set(p + "new", 1, "NX"), "OK");
  assert.equal(await r.incr(s), 6);
  assert.ok((await r.ttl(s)) > 0, "INCR keeps the TTL");
  assert.equal(await r.persist(s), 1);
  assert.equal(await r.ttl(s), -1);
  assert.equal(await r.expire(s, 100), 1);
  assert.equal(await r.ttl(p + "never"), -2);
  assert.equal(await r.pexpire(s, 300), 1);
  await sleep(500);
  assert.equal(await r.get(s), null);
  assert.equal(await r.incr(s), 1, "an expired counter restarts from 0");
  assert.equal(await r.ttl(s), -1);
  assert.equal(await r.set(s, "abc"), "OK", "a SET replaces a counter, as in Redis");
  assert.equal(await r.get(s), "abc");
  const piped2 = await r.pipeline().set(p + "ps", 5, "EX", 100).incr(p + "ps").ttl(p + "ps").exec();
  assert.deepEqual(piped2, [[null, "OK"], [null, 6], [null, 100]]);
  const tx2 = await r.multi().set(p + "ts", 5).expire(p + "ts", 100).ttl(p + "ts").exec();
  assert.deepEqual(tx2, [[null, "OK"], [null, 1], [null, 100]]);
  r.disconnect();
}

nodeRedis()
  .then(ioRedis)
  .then(() => console.log("ok"))
  .catch((e) => { console.error(e); process.exit(1); });
