package main

import (
	"fmt"
	"strconv"
)

// redisShardsFlag is --redis-shards: a number in 1..256 (unset: 0,
// redisstore's default).
type redisShardsFlag struct{ n *int }

func (v redisShardsFlag) String() string {
	if v.n == nil || *v.n == 0 {
		return ""
	}
	return strconv.Itoa(*v.n)
}

func (v redisShardsFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxRedisShards {
		return fmt.Errorf("want a number in 1..%d", maxRedisShards) // the flag package names the flag and the value
	}
	*v.n = n
	return nil
}

// maxRedisShards is redisstore's bound on Config.Shards.
const maxRedisShards = 256
