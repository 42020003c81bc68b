// A cache workload through go-redis (github.com/redis/go-redis/v9) with its defaults: the
// handshake it makes (HELLO 3: it speaks RESP3), SET with a TTL, GET, MGET, INCR, DEL,
// EXPIRE, a pipeline, a transaction (TxPipelined) and optimistic locking (Watch), a script, SCAN
// and, when QS_PASSWORD is set, AUTH. Exits non-zero on the first
// reply that is not what a Redis server answers.
//
//	go run . 6379
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func check(what string, ok bool, got any) {
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: got %v\n", what, got)
		os.Exit(1)
	}
}

func main() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + os.Args[1], Password: os.Getenv("QS_PASSWORD")})
	defer client.Close()

	check("PING", client.Ping(ctx).Val() == "PONG", client.Ping(ctx).Err())
	check("SET EX", client.Set(ctx, "session:1", "alice", time.Minute).Err() == nil, nil)
	got, err := client.Get(ctx, "session:1").Result()
	check("GET", err == nil && got == "alice", got)
	ttl := client.TTL(ctx, "session:1").Val()
	check("TTL", ttl > 50*time.Second && ttl <= time.Minute, ttl)
	_, err = client.Get(ctx, "missing").Result()
	check("GET of a missing key", errors.Is(err, redis.Nil), err)

	check("MSET", client.MSet(ctx, "a{u}", "1", "b{u}", "2").Err() == nil, nil)
	values := client.MGet(ctx, "a{u}", "missing", "b{u}").Val()
	check("MGET", len(values) == 3 && values[0] == "1" && values[1] == nil && values[2] == "2", values)

	check("INCR", client.Incr(ctx, "counter").Val() == 1, nil)
	check("INCRBY", client.IncrBy(ctx, "counter", 41).Val() == 42, nil)
	check("DECR", client.Decr(ctx, "counter").Val() == 41, nil)

	check("EXPIRE", client.Expire(ctx, "counter", time.Hour).Val(), nil)
	check("PERSIST", client.Persist(ctx, "counter").Val(), nil)
	check("DEL", client.Del(ctx, "a{u}", "b{u}", "missing").Val() == 2, nil)

	pipe := client.Pipeline()
	for i := 0; i < 100; i++ {
		pipe.Set(ctx, fmt.Sprintf("page:%d", i), fmt.Sprintf("<p>%d</p>", i), 10*time.Minute)
	}
	gets := make([]*redis.StringCmd, 100)
	for i := range gets {
		gets[i] = pipe.Get(ctx, fmt.Sprintf("page:%d", i))
	}
	_, err = pipe.Exec(ctx)
	check("pipeline", err == nil, err)
	for i, cmd := range gets {
		check("pipelined GET", cmd.Val() == fmt.Sprintf("<p>%d</p>", i), cmd.Val())
	}

	// A transaction over keys of any worker, and WATCH-based optimistic locking as go-redis's
	// docs show it: concurrent increments retried on TxFailedErr add up exactly.
	cmds, err := client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := 0; i < 20; i++ {
			pipe.Set(ctx, fmt.Sprintf("tx:%d", i), i, time.Minute)
		}
		pipe.Incr(ctx, "tx:count")
		return nil
	})
	check("TxPipelined", err == nil && len(cmds) == 21, err)
	client.Set(ctx, "tx:counter", 0, 0)
	increment := func() error {
		return client.Watch(ctx, func(tx *redis.Tx) error {
			n, err := tx.Get(ctx, "tx:counter").Int()
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.Set(ctx, "tx:counter", n+1, 0)
				return nil
			})
			return err
		}, "tx:counter")
	}
	done := make(chan error)
	for w := 0; w < 4; w++ {
		go func() {
			for i := 0; i < 50; i++ {
				for {
					err := increment()
					if err == nil {
						break
					}
					if !errors.Is(err, redis.TxFailedErr) {
						done <- err
						return
					}
				}
			}
			done <- nil
		}()
	}
	for w := 0; w < 4; w++ {
		err := <-done
		check("optimistic increments", err == nil, err)
	}
	counter, _ := client.Get(ctx, "tx:counter").Int()
	check("every increment counted once", counter == 200, counter)

	// A script as go-redis's Script runs it (EVALSHA, then EVAL on NOSCRIPT), a fixed-window
	// rate limiter as rate limiters write them: the count and the window's remaining time.
	limiter := redis.NewScript(`
local n = redis.call('incr', KEYS[1])
if n == 1 then redis.call('pexpire', KEYS[1], ARGV[1]) end
return {n, redis.call('pttl', KEYS[1])}`)
	for i := 1; i <= 5; i++ {
		got, err := limiter.Run(ctx, client, []string{"rate:{go}"}, 60000).Int64Slice()
		check("script", err == nil && len(got) == 2 && got[0] == int64(i) && got[1] > 0 && got[1] <= 60000, fmt.Sprint(err, got))
	}
	exists, err := client.ScriptExists(ctx, limiter.Hash()).Result()
	check("SCRIPT EXISTS", err == nil && len(exists) == 1 && exists[0], fmt.Sprint(err, exists))
	_, err = client.Eval(ctx, "return redis.call('incr', KEYS[1])", []string{"page:1"}).Result()
	check("a script's error", err != nil && strings.Contains(err.Error(), "not an integer"), err)

	var seen []string
	iter := client.Scan(ctx, 0, "page:*", 10).Iterator()
	for iter.Next(ctx) {
		seen = append(seen, iter.Val())
	}
	check("SCAN", iter.Err() == nil, iter.Err())
	sort.Strings(seen)
	unique := 0
	for i := range seen {
		if i == 0 || seen[i] != seen[i-1] {
			unique++
		}
	}
	check("SCAN saw every page", unique == 100, unique)
	fmt.Println("go-redis: ok")
}
