package vllm_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/vllm"
)

func Example() {
	r, err := vllm.Parse("0.26.1") // a patch release selects its minor profile
	if err != nil {
		panic(err)
	}
	old, cur := r.Rules(), vllm.Latest().Rules()
	fmt.Println(r, "stats with kv_cache_usage:", old.StatsKVCacheUsage, "wake sets running:", old.WakeSetsRunning)
	fmt.Println(vllm.Latest(), "stats with kv_cache_usage:", cur.StatsKVCacheUsage, "wake sets running:", cur.WakeSetsRunning,
		"NIXL connector version:", cur.NixlConnectorVersion)
	fmt.Println(vllm.Releases())
	// Output:
	// 0.26 stats with kv_cache_usage: false wake sets running: true
	// latest stats with kv_cache_usage: true wake sets running: false NIXL connector version: 7
	// [0.25 0.26 main-pre-50620 main-pre-51481 latest]
}
