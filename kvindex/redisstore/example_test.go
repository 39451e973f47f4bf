package redisstore_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/redisstore"
)

// A router replica's index kept in Redis: every replica that builds its
// Index on the same server and prefix (and seed) sees the same entries.
// With a WriterID, one replica at a time writes each engine. (It needs a
// running server, so it is compiled but not run by go test; the package's
// tests run the same calls on a private redis-server.)
func Example() {
	store, err := redisstore.New(redisstore.Config{
		URL:      "unix:///run/redis/redis-server.sock",
		Prefix:   "{kv-llama-8b}:",
		WriterID: redisstore.NewWriterID(),
	})
	if err != nil {
		panic(err)
	}
	x, err := kvindex.New(kvindex.Config{Backend: store})
	if err != nil {
		panic(err)
	}
	defer x.Close()
	defer store.Close()

	tokens := make([]int64, 64)
	for i := range tokens {
		tokens[i] = int64(100 + i)
	}
	x.ApplyEvents("pod-1", []kvevents.Event{{Type: kvevents.BlockStored, BlockSize: 16, TokenIDs: tokens,
		Medium: kvevents.Some("GPU"), BlockHashes: []kvevents.Hash{kvevents.IntHash(1), kvevents.IntHash(2),
			kvevents.IntHash(3), kvevents.IntHash(4)}}})
	r, err := x.Score(kvindex.ScoreRequest{Tokens: tokens})
	if err != nil {
		panic(err)
	}
	if best, ok := r.Best(); ok {
		fmt.Println(best.Engine, best.Blocks, "blocks")
	}
}
