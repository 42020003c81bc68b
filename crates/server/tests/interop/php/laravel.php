<?php
// What Laravel's Redis cache store sends through phpredis (Debian's php-redis), as its
// Illuminate\Cache\RedisStore, RedisLock and LuaScripts write it, against a Redis listener
// (crates/server/tests/resp_libraries.rs runs it against redis-server and quicksilver): the
// cache connection on database 1 (SELECT 1) beside sessions on database 0, putMany as
// MULTI + SETEX + EXEC, add as its EVAL, increment, a lock's acquire (SET NX EX) and release
// (its EVAL), and cache:clear (FLUSHDB) leaving the sessions.
//
//     php laravel.php PORT

function check($ok, $what) {
    if (!$ok) {
        fwrite(STDERR, "failed: $what\n");
        exit(1);
    }
}

$port = (int) $argv[1];
$sessions = new Redis();
$sessions->connect('127.0.0.1', $port);
$sessions->flushAll();
$sessions->set('laravel_session:abc', serialize(['user' => 7]));

$cache = new Redis();
$cache->connect('127.0.0.1', $port);
check($cache->select(1), 'SELECT 1');

// putMany: a transaction of SETEX.
$cache->multi();
foreach (['a' => 1, 'b' => 'two', 'c' => [3]] as $key => $value) {
    $cache->setex("laravel_cache:$key", 60, serialize($value));
}
$results = $cache->exec();
check($results === [true, true, true], 'putMany: ' . json_encode($results));
check(unserialize($cache->get('laravel_cache:b')) === 'two', 'get');
check($cache->mget(['laravel_cache:a', 'laravel_cache:zz'])[1] === false, 'many');

// add: LuaScripts::add.
$add = "return redis.call('exists',KEYS[1])<1 and redis.call('setex',KEYS[1],ARGV[2],ARGV[1])";
check($cache->eval($add, ['laravel_cache:a', serialize(9), 60], 1) === false, 'add of a present key');
check($cache->eval($add, ['laravel_cache:new', serialize(9), 60], 1) === true, 'add of a new key');

// increment: INCRBY of a plain number.
$cache->set('laravel_cache:hits', 5);
check($cache->incrBy('laravel_cache:hits', 3) === 8, 'increment');

// A lock: acquire with SET NX EX, release with LuaScripts::releaseLock.
check($cache->set('laravel_cache:lock', 'owner-1', ['NX', 'EX' => 10]) === true, 'acquire');
check($cache->set('laravel_cache:lock', 'owner-2', ['NX', 'EX' => 10]) === false, 'held');
$release = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend";
check($cache->eval($release, ['laravel_cache:lock', 'owner-2'], 1) === 0, 'another owner cannot release');
check($cache->eval($release, ['laravel_cache:lock', 'owner-1'], 1) === 1, 'release');

// cache:clear empties the cache's database, not the sessions'.
check($cache->flushDB() === true, 'flushdb');
check($cache->dbSize() === 0, 'cache empty');
check(unserialize($sessions->get('laravel_session:abc')) === ['user' => 7], 'sessions kept');
echo "phpredis (Laravel): ok\n";
