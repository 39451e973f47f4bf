package vllm_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/vllm"
)

func Example() {
	r, err := vllm.Parse("0.26.0") // a release number selects its profile by evidence
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

// ExampleResolve maps a build's own version string to a profile and says
// how sure the mapping is.
func ExampleResolve() {
	for _, v := range []string{"0.27.1.dev12+g5ac2684", "0.28.0rc1", "0.31.0"} {
		res, err := vllm.Resolve(v)
		if err != nil {
			panic(err)
		}
		fmt.Println(v, "->", res.Release, "proven:", res.Proven, "warning:", res.Warning != "")
	}
	// Output:
	// 0.27.1.dev12+g5ac2684 -> main-pre-50620 proven: true warning: false
	// 0.28.0rc1 -> latest proven: false warning: false
	// 0.31.0 -> latest proven: false warning: true
}
