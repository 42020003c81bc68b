// What Node.js lock, rate-limit and cache libraries send, through their own APIs, against a
// Redis listener (crates/server/tests/resp_libraries.rs runs it against redis-server and
// quicksilver):
// - node-redlock (5.0.0-beta.2) over ioredis: acquire (its Lua script over SET NX PX), a second
//   acquire refused while the first holds, extend, release;
// - rate-limit-redis under express-rate-limit: an Express app whose limiter's store loads its
//   script (SCRIPT LOAD) and counts each hit by EVALSHA; the fourth request of three allowed
//   is refused with 429;
// - @keyv/redis (cache-manager 6's store) on database 3: setMany, getMany, deleteMany.
//
//     node workload.mjs PORT
import assert from "node:assert/strict";
import Redis from "ioredis";
import Redlock from "redlock";
import express from "express";
import { rateLimit } from "express-rate-limit";
import { RedisStore } from "rate-limit-redis";
import Keyv from "keyv";
import KeyvRedis from "@keyv/redis";

const port = Number(process.argv[2]);
const client = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 1 });
await client.flushall();

async function redlock() {
  const locks = new Redlock([client], { retryCount: 0 });
  const lock = await locks.acquire(["orders:42"], 5000);
  await assert.rejects(locks.acquire(["orders:42"], 5000), "a held lock is not acquired again");
  const extended = await lock.extend(10000);
  assert.ok(extended.expiration > lock.expiration);
  await extended.release();
  assert.equal(await client.exists("orders:42"), 0);
  const again = await locks.acquire(["orders:42"], 5000);
  await again.release();
}

async function rateLimited() {
  const app = express();
  const store = new RedisStore({ sendCommand: (...args) => client.call(...args), prefix: "rl:" });
  app.use(rateLimit({ windowMs: 60000, limit: 3, store, standardHeaders: "draft-7", legacyHeaders: false }));
  app.get("/", (_req, res) => res.send("ok"));
  const server = await new Promise((resolve) => {
    const listening = app.listen(0, "127.0.0.1", () => resolve(listening));
  });
  const url = `http://127.0.0.1:${server.address().port}/`;
  const statuses = [];
  for (let i = 0; i < 5; i++) {
    statuses.push((await fetch(url)).status);
  }
  server.close();
  assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
  assert.ok((await client.pttl("rl:127.0.0.1")) > 0);
}

async function keyvCache() {
  const keyv = new Keyv(new KeyvRedis(`redis://127.0.0.1:${port}/3`), { namespace: "app" });
  await keyv.setMany([
    { key: "a", value: { n: 1 } },
    { key: "b", value: "two", ttl: 60000 },
  ]);
  assert.deepEqual(await keyv.getMany(["a", "b", "c"]), [{ n: 1 }, "two", undefined]);
  await keyv.deleteMany(["a", "b"]);
  assert.deepEqual(await keyv.getMany(["a", "b"]), [undefined, undefined]);
  await keyv.set("kept", "yes");
  assert.equal(await client.exists("app:kept"), 0, "database 0 does not hold database 3's keys");
  await keyv.disconnect();
}

await redlock();
await rateLimited();
await keyvCache();
client.disconnect();
console.log("node libraries: ok");
