package layering

// Repo is zmqguard's layering, bottom-up; docs/architecture.md draws it.
// A new package goes in the lowest layer at or above everything it imports.
var Repo = Table{
	Module: "github.com/zmqguard/zmqguard",
	File:   "internal/testkit/layering/table.go",
	Layers: []Layer{{
		// The vocabulary every layer shares: the closed set of reasons and
		// the stack's own helpers (internal/stack: ZMTP parsers, the
		// msgpack pre-scan, the rate-limited log).
		Name: "L0 vocabulary", Library: true, Stack: true,
		Packages: []string{
			"decodeguard",
			"internal/stack/...",
		},
	}, {
		// The stack, in import order.
		Name: "L1 stack", Library: true, Stack: true, Ordered: true,
		Packages: []string{"zmtpguard", "socket", "envelope", "loop"},
	}, {
		// vLLM's wire and the references' shared helpers (internal/ref).
		Name: "L2 wire", Library: true,
		Packages: []string{
			"enginecore", "vllm",
			"internal/ref/sockopt", "internal/ref/dpwire", "internal/ref/dppeer", "internal/ref/nixlwire", "internal/ref/kvkey",
		},
	}, {
		// One vLLM stream each, and the index on the KV-cache events.
		Name: "L3 references", Library: true,
		Packages: []string{
			"handshake", "coordinator", "kvevents/...", "outputs", "kvindex/...",
			"internal/ref/kvmodel", // kvindex's reference model: it imports kvindex, and kvindextest runs it
		},
	}, {
		Name: "L4 metrics", Library: true,
		Packages: []string{"metrics/..."},
	}, {
		// Programs and what only tests and tools import.
		Name:     "tools",
		Packages: []string{"cmd/...", "examples/...", "bench/...", "reliability/...", "internal/testkit/..."},
	}},
	// The stack is built on these (zmq4's codec and what it needs, msgp's
	// runtime): a program that imports only the stack resolves nothing
	// else. Prometheus, OpenTelemetry and Redis never appear here.
	StackModules: []string{
		"github.com/go-zeromq/zmq4",
		"github.com/tinylib/msgp",
		"github.com/philhofer/fwd",
		"golang.org/x/crypto",
		"golang.org/x/sync",
		"golang.org/x/sys",
		"golang.org/x/text",
	},
}
