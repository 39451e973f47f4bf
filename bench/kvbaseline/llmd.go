package main

// -mode llmd: llm-d-kv-cache v0.8.1's indexer, as a library, following the
// engines of bench/routerpath (which runs this as its "llmd" variant). The
// path is llm-d's own: a SubscriberManager (one zmq4 SUB per engine,
// dialing its endpoint), the event Pool (sharded workers, the vLLM adapter
// decoding each batch, the chunked token processor keying the blocks) and
// the in-memory kvblock index of the Indexer, which ScoreTokens queries.
//
// Protocol with bench/routerpath, on standard output: "applied N" every
// 10 ms (events applied: BlockStored events added, or dropped for an
// unknown parent, plus BlockRemoved events, each removing kvstream.SteadyBlocks
// blocks); on standard input: "mem" answers "mem HEAP_BYTES ENTRIES"
// (heap after a GC; entries = blocks added − blocks evicted), "score
// SECONDS INTERVAL_NS" scores the prompt every interval for that long and
// answers "scores NS NS ..." (each call's latency).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache/kvblock"
	llmdevents "github.com/llm-d/llm-d-kv-cache/pkg/kvevents"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents/engineadapter"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/zmqguard/zmqguard/bench/internal/kvstream"
)

// countingIndex counts what llm-d's Pool does to the index.
type countingIndex struct {
	kvblock.Index
	adds, addedKeys, evicts, parentMisses atomic.Int64
}

func (c *countingIndex) Add(ctx context.Context, engineKeys, requestKeys []kvblock.BlockHash, entries []kvblock.PodEntry) error {
	err := c.Index.Add(ctx, engineKeys, requestKeys, entries)
	c.addedKeys.Add(int64(len(requestKeys)))
	c.adds.Add(1)
	return err
}

func (c *countingIndex) Evict(ctx context.Context, key kvblock.BlockHash, keyType kvblock.KeyType, entries []kvblock.PodEntry) error {
	err := c.Index.Evict(ctx, key, keyType, entries)
	c.evicts.Add(1)
	return err
}

func (c *countingIndex) GetRequestKey(ctx context.Context, engineKey kvblock.BlockHash) (kvblock.BlockHash, error) {
	k, err := c.Index.GetRequestKey(ctx, engineKey)
	if err != nil {
		c.parentMisses.Add(1)
	}
	return k, err
}

func (c *countingIndex) applied() int64 {
	return c.adds.Load() + c.parentMisses.Load() + c.evicts.Load()/kvstream.SteadyBlocks
}

func runLLMD(endpointsFile, promptFile string) error {
	if os.Getenv("LLMD_LOG") != "" {
		ctrllog.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: 5}))
	} else {
		ctrllog.SetLogger(logr.Discard())
	}
	b, err := os.ReadFile(endpointsFile)
	if err != nil {
		return err
	}
	eps := strings.Fields(string(b))
	pb, err := os.ReadFile(promptFile)
	if err != nil {
		return err
	}
	var p64 []int64
	if err := json.Unmarshal(pb, &p64); err != nil {
		return fmt.Errorf("%s: %w", promptFile, err)
	}
	tokens := make([]uint32, len(p64))
	for i, t := range p64 {
		tokens[i] = uint32(t)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := kvcache.NewDefaultConfig()
	if err != nil {
		return err
	}
	tp, err := kvblock.NewChunkedTokenDatabase(kvblock.DefaultTokenProcessorConfig())
	if err != nil {
		return err
	}
	indexer, err := kvcache.NewKVCacheIndexer(ctx, cfg, tp)
	if err != nil {
		return err
	}
	idx := &countingIndex{Index: indexer.KVBlockIndex()}
	adapter, err := engineadapter.NewAdapter("vllm")
	if err != nil {
		return err
	}
	pcfg := llmdevents.DefaultConfig()
	pcfg.DiscoverPods = false
	pool := llmdevents.NewPool(pcfg, idx, tp, adapter)
	pool.Start(ctx)
	mgr := llmdevents.NewSubscriberManager(pool)
	for i, ep := range eps {
		if err := mgr.EnsureSubscriber(ctx, kvstream.EngineName(i), ep, "kv@", true); err != nil {
			return err
		}
	}

	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", a...)
		out.Flush()
		outMu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				say("applied %d", idx.applied())
			}
		}
	}()
	defer close(done)

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "mem":
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			say("mem %d %d", m.HeapAlloc, idx.addedKeys.Load()-idx.evicts.Load())
		case "score":
			secs, _ := strconv.ParseFloat(f[1], 64)
			ivl, _ := strconv.ParseInt(f[2], 10, 64)
			interval := time.Duration(ivl)
			end := time.Now().Add(time.Duration(secs * float64(time.Second)))
			next := time.Now()
			var sb strings.Builder
			sb.WriteString("scores")
			var failure error
			for time.Now().Before(end) {
				if w := time.Until(next); w > 0 {
					time.Sleep(w)
				}
				next = next.Add(interval)
				s := time.Now()
				scores, err := indexer.ScoreTokens(ctx, tokens, kvstream.Model, nil, nil)
				d := time.Since(s)
				if err == nil && len(scores) == 0 {
					err = fmt.Errorf("ScoreTokens found no pod")
				}
				if err != nil {
					failure = err
					break
				}
				fmt.Fprintf(&sb, " %d", d.Nanoseconds())
			}
			if failure != nil {
				say("error %v", failure)
			} else {
				say("%s", sb.String())
			}
		}
	}
	mgr.Shutdown(ctx)
	cancel()
	pool.Shutdown(context.Background())
	return nil
}
