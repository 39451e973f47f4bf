package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

var kvPublishSpec = commandSpec{
	name:     "kv-publish",
	synopsis: "--bind ADDR [--replay-bind ADDR] [--engine vllm|sglang] [--allow CIDR,...] [--topic T] [--rate R] [--count N] [--curve-secret-key-file F --curve-allow PATH]",
	summary:  "publish synthetic vLLM or SGLang KV-event batches (demos and load)",
	help: `Publishes synthetic KV-event batches with the bytes vLLM's ZmqEventPublisher
sends for --vllm-version (tagged-map events and topic-framed replay since
0.26): each batch holds --stored BlockStored events of 4 blocks (64 token
ids, block size 16) chained as one request's blocks are (each event's
parent_block_hash is the previous event's last hash; hashes are
random-looking uint64s, as vLLM's are), and, from the second batch on, one
BlockRemoved of the previous batch's first block (--remove=false leaves it
out: every batch's blocks stay cached). --replay-bind serves the replay buffer
(the last 10,000 batches). Publishing never blocks: batches beyond the
queue are dropped and counted.

--engine sglang sends SGLang's bytes instead (byte for byte what SGLang's
ZmqEventPublisher writes, --vllm-version aside): events as SGLang's tagged
arrays, one BlockStored per page (16 tokens here) with one signed int64
hash, about half of them negative, as SGLang's are, each page's parent the
previous page; attn_dp_rank from --dp-rank; replay replies without a topic
frame.

It publishes --rate batches per second (0: as fast as possible) until
--count batches (0: until SIGINT/SIGTERM) and prints one JSON line of
counters on stdout. It sets a soft Go memory limit of 640 MiB (its two send
budgets, the replay buffer and slack; GOMEMLIMIT, when set, wins). --curve-secret-key-file and --curve-allow serve both
sockets under CURVE only, to the listed client keys.`,
}

// kvSynthetic builds the events of synthetic batch n: stored events of 4
// blocks and 64 token ids each (block size 16), each block's hash a
// random-looking uint64 like vLLM's int hashes (the low 64 bits of a
// digest), the events of a batch one request's chain (each event's
// parent_block_hash the previous event's last block hash, nil for the
// first), then one removal of the previous batch's first block.
func kvSynthetic(n uint64, stored int, evs []kvevents.Event) []kvevents.Event {
	evs = evs[:0]
	for i := 0; i < stored; i++ {
		base := n*uint64(stored)*4 + uint64(i)*4
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, Medium: kvevents.Some("GPU")}
		if i > 0 {
			ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(kvBlockHash(base - 1)), Valid: true}
		}
		for j := uint64(0); j < 4; j++ {
			ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(kvBlockHash(base+j)))
		}
		for j := int64(0); j < 64; j++ {
			ev.TokenIDs = append(ev.TokenIDs, (int64(base)*16+j)%150000)
		}
		evs = append(evs, ev)
	}
	if n > 0 {
		evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
			BlockHashes: []kvevents.Hash{kvevents.IntHash(kvBlockHash((n - 1) * uint64(stored) * 4))}})
	}
	return evs
}

// kvSyntheticSGLang builds the events of synthetic batch n as SGLang's
// KVCacheEventMixin publishes them: one BlockStored per page (one hash,
// the signed int64 SGLang holds; parent the previous page, nil for the
// batch's first), the same pages and tokens as kvSynthetic, then one
// removal of the previous batch's first page.
func kvSyntheticSGLang(n uint64, stored int, evs []kvevents.Event) []kvevents.Event {
	evs = evs[:0]
	pages := uint64(stored) * 4
	for k := uint64(0); k < pages; k++ {
		page := n*pages + k
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, Medium: kvevents.Some("GPU"),
			BlockHashes: []kvevents.Hash{kvevents.SignedHash(int64(kvBlockHash(page)))}}
		if k > 0 {
			ev.ParentBlockHash = kvevents.Some(kvevents.SignedHash(int64(kvBlockHash(page - 1))))
		}
		for j := int64(0); j < 16; j++ {
			ev.TokenIDs = append(ev.TokenIDs, (int64(page)*16+j)%150000)
		}
		evs = append(evs, ev)
	}
	if n > 0 {
		evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
			BlockHashes: []kvevents.Hash{kvevents.SignedHash(int64(kvBlockHash((n - 1) * pages)))}})
	}
	return evs
}

// kvBlockHash is synthetic block k's hash: splitmix64's finalizer, a
// bijection, so distinct blocks never share a hash.
func kvBlockHash(k uint64) uint64 {
	z := k + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// kvPublishFlags are the flags of kvPublish.
type kvPublishFlags struct {
	bind       string
	replayBind string
	topic      string
	rate       float64
	count      uint64
	stored     int
	remove     bool
	dp         int
	engine     string
	version    *vllm.Release
	curve      *curveServerFlags
	allow      *allowFlag
}

// kvPublishCmd is the kvPublish command.
var kvPublishCmd = command[kvPublishFlags]{
	spec: kvPublishSpec,
	register: func(fs *flag.FlagSet, fl *kvPublishFlags) {
		fs.StringVar(&fl.bind, "bind", "", "live endpoint to bind, e.g. tcp://127.0.0.1:5557 (required)")
		fs.StringVar(&fl.replayBind, "replay-bind", "", "replay endpoint to bind, e.g. tcp://127.0.0.1:5558")
		fs.StringVar(&fl.topic, "topic", "", "topic frame of every message")
		fs.Float64Var(&fl.rate, "rate", 100, "batches per second (0: as fast as possible)")
		fs.Uint64Var(&fl.count, "count", 0, "batches to publish (0: until SIGINT/SIGTERM)")
		fs.IntVar(&fl.stored, "stored", 16, "BlockStored events per batch")
		fs.BoolVar(&fl.remove, "remove", true, "from the second batch on, remove the previous batch's first block (false: stores only)")
		fs.IntVar(&fl.dp, "dp-rank", 0, "data_parallel_rank (offsets the ports as vLLM does)")
		fs.StringVar(&fl.engine, "engine", "vllm", "whose bytes to send: vllm (per --vllm-version) or sglang")
		fl.version = releaseFlag(fs)
		fl.curve = addCurveServerFlags(fs)
		fl.allow = addAllowFlag(fs)
	},
	run: runKVPublish,
}

// runKVPublish is the run function of kvPublish: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runKVPublish(ctx context.Context, fl *kvPublishFlags, e *env) error {
	if fl.bind == "" {
		return usagef("--bind is required")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--rate", float64(fl.rate)}, {"--stored", float64(fl.stored)}, {"--dp-rank", float64(fl.dp)}} {
		if f.v < 0 {
			return badFlag(f.name, f.v, "must not be negative")
		}
	}
	synthetic := kvSynthetic
	switch fl.engine {
	case "vllm":
	case "sglang":
		synthetic = kvSyntheticSGLang
	default:
		return usagef("--engine %q unknown (want vllm or sglang)", fl.engine)
	}
	cc, stopCurve, err := fl.curve.config(ctx, e.logger)
	if err != nil {
		return err
	}
	defer stopCurve()
	var sopts socket.Options
	sopts.Guard.Curve = cc
	fl.allow.apply(&sopts.Guard) // live and replay ports
	rel := *fl.version
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Release: rel, Engine: fl.engine, Endpoint: fl.bind, Bind: true,
		ReplayEndpoint: fl.replayBind, Topic: fl.topic, DataParallelRank: fl.dp, Logger: e.logger, Socket: sopts})
	if err != nil {
		return err
	}
	defer pub.Close()
	memLimit, restoreLimit := setMemoryLimit(kvPublishMemLimit(sopts.SendTotalBytes))
	defer restoreLimit()
	e.logger.Info("kv-publish", "endpoint", pub.Endpoint(), "replay", pub.ReplayEndpoint(), "rate", fl.rate,
		"count", fl.count, "engine", fl.engine, "vllm", rel.String(), "memory_limit", memLimit)
	var tick <-chan time.Time
	if fl.rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / fl.rate))
		defer t.Stop()
		tick = t.C
	}
	var evs []kvevents.Event
	var n uint64
publish:
	for fl.count == 0 || n < fl.count {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				break publish
			}
		} else if ctx.Err() != nil {
			break
		}
		evs = synthetic(n, fl.stored, evs)
		if !fl.remove && n > 0 {
			evs = evs[:len(evs)-1] // the removal is the batch's last event
		}
		if err := pub.Publish(evs...); errors.Is(err, kvevents.ErrQueueFull) {
			if tick == nil {
				time.Sleep(time.Millisecond)
			}
			continue
		} else if err != nil {
			return err
		}
		n++
	}
	// Let the queue drain before reporting (bounded).
	deadline := time.Now().Add(5 * time.Second)
	for pub.Stats().Published < n && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	out, err := json.Marshal(struct {
		Endpoint string                  `json:"endpoint"`
		Batches  uint64                  `json:"batches"`
		Stats    kvevents.PublisherStats `json:"stats"`
	}{pub.Endpoint(), n, pub.Stats()})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\n", out)
	return nil
}
