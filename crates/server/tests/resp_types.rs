//! Redis's collections through a real client: redis-py's own API runs a session store, a tag
//! index, a leaderboard and a rate limiter's window (hashes, sets, sorted sets, lists) against
//! redis-server and against quicksilver (one and four workers), and what each run read must be
//! the same.

mod common;

use common::resp::{quicksilver, redis_py_script, Redis};

#[test]
fn redis_py_reads_collections_as_against_redis_server() {
    let redis = Redis::start();
    let expected = redis_py_script("redis_py_types.py", redis.port, "redis-server");
    for workers in ["1", "4"] {
        let (_server, port) = quicksilver(&["-t", workers]);
        assert_eq!(
            redis_py_script("redis_py_types.py", port, &format!("quicksilver -t {workers}")),
            expected,
            "-t {workers}"
        );
    }
}
