// What Go lock and rate-limit libraries send, through their own APIs, against a Redis
// listener (crates/server/tests/resp_libraries.rs runs it against redis-server and
// quicksilver):
//   - go-redsync over go-redis: Lock (SET NX PX), a second mutex refused while the first holds,
//     Extend and Unlock (their Lua scripts, EVALSHA with EVAL on NOSCRIPT);
//   - go-redis/redis_rate: Allow per request under a limit of 3 a minute (its GCRA script, by
//     EVALSHA), the fourth refused, then Reset.
//
//	go run . PORT
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

func check(ok bool, what string, args ...any) {
	if !ok {
		fmt.Fprintf(os.Stderr, what+"\n", args...)
		os.Exit(1)
	}
}

func main() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + os.Args[1], DB: 4})
	check(client.FlushDB(ctx).Err() == nil, "flushdb")

	sync := redsync.New(goredis.NewPool(client))
	mutex := sync.NewMutex("orders:42", redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
	check(mutex.LockContext(ctx) == nil, "lock")
	other := sync.NewMutex("orders:42", redsync.WithTries(1))
	check(other.LockContext(ctx) != nil, "a held lock was taken again")
	extended, err := mutex.ExtendContext(ctx)
	check(extended && err == nil, "extend: %v", err)
	unlocked, err := mutex.UnlockContext(ctx)
	check(unlocked && err == nil, "unlock: %v", err)
	check(client.Exists(ctx, "orders:42").Val() == 0, "the lock's key is gone")

	limiter := redis_rate.NewLimiter(client)
	limit := redis_rate.PerMinute(3)
	allowed := []int{}
	for i := 0; i < 5; i++ {
		res, err := limiter.Allow(ctx, "api:user:7", limit)
		check(err == nil, "allow: %v", err)
		allowed = append(allowed, res.Allowed)
	}
	check(fmt.Sprint(allowed) == "[1 1 1 0 0]", "allowed %v", allowed)
	check(limiter.Reset(ctx, "api:user:7") == nil, "reset")
	res, err := limiter.Allow(ctx, "api:user:7", limit)
	check(err == nil && res.Allowed == 1, "allowed after reset: %v %v", res, err)
	fmt.Println("go libraries: ok")
}
