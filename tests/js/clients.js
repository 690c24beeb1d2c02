// node-redis and ioredis against one Tally node: both open with RESP3 (their
// default), then counters, a pipeline and a MULTI/EXEC transaction.
// Usage: NODE_PATH=.../node_modules node clients.js PORT (see node_clients.rs)
const assert = require("node:assert/strict");
const { createClient } = require("redis");
const Redis = require("ioredis");
const port = Number(process.argv[2]);

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
  r.disconnect();
}

nodeRedis()
  .then(ioRedis)
  .then(() => console.log("ok"))
  .catch((e) => { console.error(e); process.exit(1); });
