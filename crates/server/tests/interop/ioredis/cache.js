// A cache workload through ioredis with its defaults: its handshake (INFO when it connects),
// SET with a TTL, GET, MGET, INCR, DEL, EXPIRE, a pipeline, a transaction (multi: what
// @keyv/redis's setMany sends), a watched key, SCAN (scanStream) and, when
// QS_PASSWORD is set, AUTH. Exits non-zero on the first reply that is not what a Redis server
// answers.
//
//   node cache.js 6379
'use strict';
const Redis = require('ioredis');

function check(what, ok, got) {
  if (!ok) {
    console.error(`${what}: got ${JSON.stringify(got)}`);
    process.exit(1);
  }
}

async function main() {
  const port = Number(process.argv[2]);
  const redis = new Redis({ port, host: '127.0.0.1', password: process.env.QS_PASSWORD || undefined,
    maxRetriesPerRequest: 1, retryStrategy: () => null });
  check('PING', (await redis.ping()) === 'PONG');
  check('SET EX', (await redis.set('session:1', 'alice', 'EX', 60)) === 'OK');
  check('GET', (await redis.get('session:1')) === 'alice');
  const ttl = await redis.ttl('session:1');
  check('TTL', ttl > 50 && ttl <= 60, ttl);
  check('GET of a missing key', (await redis.get('missing')) === null);
  check('MSET', (await redis.mset('a{u}', '1', 'b{u}', '2')) === 'OK');
  const values = await redis.mget('a{u}', 'missing', 'b{u}');
  check('MGET', JSON.stringify(values) === JSON.stringify(['1', null, '2']), values);
  check('INCR', (await redis.incr('counter')) === 1);
  check('INCRBY', (await redis.incrby('counter', 41)) === 42);
  check('INCRBYFLOAT', (await redis.incrbyfloat('counter', '0.5')) === '42.5');
  check('EXPIRE', (await redis.expire('counter', 3600)) === 1);
  check('DEL', (await redis.del('a{u}', 'b{u}', 'missing')) === 2);
  const pipeline = redis.pipeline();
  for (let i = 0; i < 100; i++) pipeline.set(`page:${i}`, `<p>${i}</p>`, 'EX', 600);
  for (let i = 0; i < 100; i++) pipeline.get(`page:${i}`);
  const results = await pipeline.exec();
  results.slice(100).forEach(([err, value], i) => check('pipelined GET', !err && value === `<p>${i}</p>`, value));
  // A transaction over keys of any worker, as @keyv/redis's setMany and deleteMany send it.
  const multi = redis.multi();
  for (let i = 0; i < 20; i++) multi.set(`keyv:${i}`, `v${i}`, 'PX', 60000);
  multi.incr('keyv:count');
  multi.mget('keyv:0', 'keyv:19');
  const done = await multi.exec();
  check('MULTI/EXEC', done.length === 22 && done.every(([err]) => !err), done);
  check('EXEC replies', done[20][1] === 1 && JSON.stringify(done[21][1]) === JSON.stringify(['v0', 'v19']), done);
  // WATCH, a write by another connection, then EXEC: null, nothing run.
  const other = new Redis({ port, host: '127.0.0.1', password: process.env.QS_PASSWORD || undefined });
  await redis.watch('keyv:0');
  await other.set('keyv:0', 'changed');
  const aborted = await redis.multi().set('keyv:0', 'mine').exec();
  check('EXEC after a watched write', aborted === null, aborted);
  check('the other write stands', (await redis.get('keyv:0')) === 'changed');
  await other.quit();
  // A lock released by a script, as Redlock libraries release one: ioredis's defineCommand
  // sends EVALSHA, then EVAL on NOSCRIPT.
  redis.defineCommand('release', {
    numberOfKeys: 1,
    lua: "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
  });
  await redis.set('lock:{io}', 'token', 'PX', 30000);
  check('release by another', (await redis.release('lock:{io}', 'other')) === 0);
  check('release by the holder', (await redis.release('lock:{io}', 'token')) === 1);
  check('released', (await redis.get('lock:{io}')) === null);
  await redis.script('FLUSH');
  await redis.set('lock:{io}', 'token', 'PX', 30000);
  check('release after SCRIPT FLUSH', (await redis.release('lock:{io}', 'token')) === 1);
  const seen = new Set();
  await new Promise((resolve, reject) => {
    const stream = redis.scanStream({ match: 'page:*', count: 10 });
    stream.on('data', (keys) => keys.forEach((key) => seen.add(key)));
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  check('SCAN saw every page', seen.size === 100, seen.size);
  await redis.quit();
  console.log('ioredis: ok');
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
