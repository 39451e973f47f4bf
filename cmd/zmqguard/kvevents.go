package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

var kvEventsSpec = commandSpec{
	name:     "kv-events",
	synopsis: "--connect ADDR [--replay ADDR] [--connect ADDR [--replay ADDR]]... [--bind ADDR] [--allow CIDR,...] [--topic T] [--from-start] [--count N] [--curve-server-key Z85 [--curve-secret-key-file F]]",
	summary:  "follow vLLM KV-cache event publishers, one JSON line per event",
	help: `Subscribes to the KV-event publishers of vLLM engines (or anything speaking
their wire) through hardened SUB sockets, and prints one JSON object per
event on stdout, in order and exactly once per source:

  {"source": ADDR, "seq": N, "ts": F, "dp_rank": N|null, "index": I,
   "type": "BlockStored"|"BlockRemoved"|"AllBlocksCleared",
   "block_hashes": [...], ...every other field under vLLM's name}

I is the event's position in its batch; integer hashes print as JSON
integers, bin hashes as lower-case hex strings. A publisher restart prints
{"source": ADDR, "type": "reset", "seq": N}, a range that could not be
recovered {"source": ADDR, "type": "lost", "from": A, "to": B} (B
exclusive).

Each --replay belongs to the --connect (or --bind) before it: a gap in that
source's sequence is then recovered from the publisher's replay endpoint
(a DEALER request, bounded by --replay-timeout of silence). --bind listens
for a publisher that connects (vLLM connects when its endpoint names a
host). --from-start replays from sequence 0 on joining, instead of starting
at the first batch seen.

--curve-server-key (the publisher's public key, Z85) makes every SUB and
replay DEALER speak CURVE as the client, with the key pair of
--curve-secret-key-file (a .key_secret certificate the publisher admits) or,
without it, a fresh key pair that only a publisher admitting any key lets in.

After --count events (or on SIGINT/SIGTERM) the last stdout line is
{"counters": {...}} with per-source and total batches, events, gaps,
replayed, lost, resets, drops by reason, and the names of event types this
release does not know (dropped as "unsupported"); the exit code is 0.`,
}

var kvPublishSpec = commandSpec{
	name:     "kv-publish",
	synopsis: "--bind ADDR [--replay-bind ADDR] [--allow CIDR,...] [--topic T] [--rate R] [--count N] [--curve-secret-key-file F --curve-allow PATH]",
	summary:  "publish synthetic vLLM KV-event batches (demos and load)",
	help: `Publishes synthetic KV-event batches with the bytes vLLM's ZmqEventPublisher
sends for --vllm-version (tagged-map events and topic-framed replay since
0.26): each batch holds --stored BlockStored events of 4 blocks (64 token
ids, block size 16) chained as one request's blocks are (each event's
parent_block_hash is the previous event's last hash; hashes are
random-looking uint64s, as vLLM's are), and, from the second batch on, one
BlockRemoved of the previous batch's first block. --replay-bind serves the replay buffer
(the last 10,000 batches). Publishing never blocks: batches beyond the
queue are dropped and counted.

It publishes --rate batches per second (0: as fast as possible) until
--count batches (0: until SIGINT/SIGTERM) and prints one JSON line of
counters on stdout. --curve-secret-key-file and --curve-allow serve both
sockets under CURVE only, to the listed client keys.`,
}

// kvSourcesFlag collects --connect/--bind/--replay in order.
type kvSourcesFlag struct {
	list []kvevents.Source
}

type kvSourceFlag struct {
	f    *kvSourcesFlag
	bind bool
}

func (v kvSourceFlag) String() string { return "" }

func (v kvSourceFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty endpoint")
	}
	v.f.list = append(v.f.list, kvevents.Source{Name: s, Live: s, Bind: v.bind})
	return nil
}

type kvReplayFlag struct{ f *kvSourcesFlag }

func (v kvReplayFlag) String() string { return "" }

func (v kvReplayFlag) Set(s string) error {
	if len(v.f.list) == 0 {
		return errors.New("--replay must follow the --connect it belongs to")
	}
	last := &v.f.list[len(v.f.list)-1]
	if last.Replay != "" {
		return fmt.Errorf("--connect %s already has --replay %s", last.Live, last.Replay)
	}
	last.Replay = s
	return nil
}

// kvPrinter writes the event lines; the handler runs on many goroutines.
type kvPrinter struct {
	mu     sync.Mutex
	w      *bufio.Writer
	buf    []byte
	events uint64
	count  uint64
	done   func()
	err    error
}

// appendJSONString appends s as a JSON string (peer text: json.Marshal
// escapes control characters; the decoders refuse invalid UTF-8).
func appendJSONString[S string | []byte](b []byte, s S) []byte {
	q, _ := json.Marshal(string(s))
	return append(b, q...)
}

func appendHashJSON(b []byte, h kvevents.Hash) []byte {
	if h.IsBytes() {
		return append(append(append(b, '"'), h.String()...), '"')
	}
	return strconv.AppendUint(b, h.Uint64(), 10)
}

func appendOptIntJSON(b []byte, v kvevents.OptInt) []byte {
	if !v.Valid {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, v.V, 10)
}

func appendOptStringJSON(b []byte, v kvevents.OptString) []byte {
	if !v.Valid {
		return append(b, "null"...)
	}
	return appendJSONString(b, v.V)
}

func appendField(b []byte, name string) []byte {
	b = append(b, ", \""...)
	b = append(b, name...)
	return append(b, "\": "...)
}

// appendEventJSON renders one event line (without the newline).
func appendEventJSON(b []byte, u kvevents.Update, i int) []byte {
	bt := u.Batch
	e := &bt.Events[i]
	b = append(b, `{"source": `...)
	b = appendJSONString(b, u.Source)
	b = appendField(b, "seq")
	b = strconv.AppendUint(b, u.Seq, 10)
	b = appendField(b, "ts")
	if math.IsNaN(bt.TS) || math.IsInf(bt.TS, 0) {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendFloat(b, bt.TS, 'f', -1, 64)
	}
	b = appendField(b, "dp_rank")
	b = appendOptIntJSON(b, bt.DataParallelRank)
	b = appendField(b, "index")
	b = strconv.AppendInt(b, int64(bt.Index[i]), 10)
	b = appendField(b, "type")
	b = appendJSONString(b, e.Type.String())
	b = appendField(b, "block_hashes")
	b = append(b, '[')
	for j, h := range e.BlockHashes {
		if j > 0 {
			b = append(b, ", "...)
		}
		b = appendHashJSON(b, h)
	}
	b = append(b, ']')
	switch e.Type {
	case kvevents.BlockStored:
		b = appendField(b, "parent_block_hash")
		if e.ParentBlockHash.Valid {
			b = appendHashJSON(b, e.ParentBlockHash.V)
		} else {
			b = append(b, "null"...)
		}
		b = appendField(b, "token_ids")
		b = append(b, '[')
		for j, t := range e.TokenIDs {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendInt(b, t, 10)
		}
		b = append(b, ']')
		b = appendField(b, "block_size")
		b = strconv.AppendInt(b, e.BlockSize, 10)
		b = appendField(b, "lora_id")
		b = appendOptIntJSON(b, e.LoraID)
		b = appendField(b, "medium")
		b = appendOptStringJSON(b, e.Medium)
		b = appendField(b, "lora_name")
		b = appendOptStringJSON(b, e.LoraName)
		if e.HasExtraKeys {
			b = appendField(b, "extra_keys")
			b = append(b, '[')
			for j, k := range e.ExtraKeys {
				if j > 0 {
					b = append(b, ", "...)
				}
				var out bytes.Buffer
				if _, err := msgp.UnmarshalAsJSON(&out, k); err != nil {
					b = append(b, "null"...)
				} else {
					b = append(b, bytes.TrimSpace(out.Bytes())...)
				}
			}
			b = append(b, ']')
		}
		b = appendOpt(b, "group_idx", e.GroupIdx)
		b = appendOptS(b, "kv_cache_spec_kind", e.KVCacheSpecKind)
		b = appendOpt(b, "kv_cache_spec_sliding_window", e.KVCacheSpecSlidingWindow)
	case kvevents.BlockRemoved:
		b = appendField(b, "medium")
		b = appendOptStringJSON(b, e.Medium)
		b = appendOpt(b, "group_idx", e.GroupIdx)
	}
	if e.Type != kvevents.AllBlocksCleared {
		b = appendOptS(b, "locality", e.Locality)
		b = appendOptS(b, "ownership", e.Ownership)
	}
	if e.Type == kvevents.BlockStored {
		b = appendOptS(b, "session_id", e.SessionID)
	}
	return append(b, '}')
}

// appendOpt and appendOptS write an optional field only when it was sent.
func appendOpt(b []byte, name string, v kvevents.OptInt) []byte {
	if !v.Valid {
		return b
	}
	return appendOptIntJSON(appendField(b, name), v)
}

func appendOptS(b []byte, name string, v kvevents.OptString) []byte {
	if !v.Valid {
		return b
	}
	return appendOptStringJSON(appendField(b, name), v)
}

func (p *kvPrinter) handle(_ context.Context, u kvevents.Update) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count > 0 && p.events >= p.count {
		return nil
	}
	b := p.buf[:0]
	switch u.Kind {
	case kvevents.UpdateBatch:
		for i := range u.Batch.Events {
			if p.count > 0 && p.events >= p.count {
				break
			}
			b = appendEventJSON(b, u, i)
			b = append(b, '\n')
			p.events++
		}
	case kvevents.UpdateReset:
		b = append(b, `{"source": `...)
		b = appendJSONString(b, u.Source)
		b = append(b, `, "type": "reset", "seq": `...)
		b = strconv.AppendUint(b, u.Seq, 10)
		b = append(b, "}\n"...)
	case kvevents.UpdateLost:
		b = append(b, `{"source": `...)
		b = appendJSONString(b, u.Source)
		b = append(b, `, "type": "lost", "from": `...)
		b = strconv.AppendUint(b, u.From, 10)
		b = append(b, `, "to": `...)
		b = strconv.AppendUint(b, u.To, 10)
		b = append(b, "}\n"...)
	}
	p.buf = b
	if _, err := p.w.Write(b); err != nil && p.err == nil {
		p.err = err
	}
	if err := p.w.Flush(); err != nil && p.err == nil {
		p.err = err
	}
	if p.count > 0 && p.events >= p.count {
		p.done()
	}
	return nil
}

// kvCounters is one source's (or the total's) part of the counters line.
type kvCounters struct {
	Batches       uint64               `json:"batches"`
	Events        uint64               `json:"events"`
	EventsByType  kvevents.EventCounts `json:"events_by_type"`
	Gaps          uint64               `json:"gaps"`
	Replayed      uint64               `json:"replayed"`
	Lost          uint64               `json:"lost"`
	Resets        uint64               `json:"resets"`
	Dropped       decodeguard.Counts   `json:"dropped"`
	DroppedEvents decodeguard.Counts   `json:"dropped_events"`
	// UnsupportedTypes counts events of types this release does not know,
	// by (escaped) name.
	UnsupportedTypes map[string]uint64  `json:"unsupported_types,omitempty"`
	Refused          decodeguard.Counts `json:"refused"`
	Connected        bool               `json:"connected"`
}

type kvCountersLine struct {
	Counters struct {
		Sources map[string]kvCounters `json:"sources"`
		Total   kvCounters            `json:"total"`
	} `json:"counters"`
}

func toCounters(s kvevents.SourceStats) kvCounters {
	return kvCounters{Batches: s.Batches, Events: s.Events.BlockStored + s.Events.BlockRemoved + s.Events.AllBlocksCleared,
		EventsByType: s.Events, Gaps: s.Gaps, Replayed: s.Replayed, Lost: s.Lost, Resets: s.Resets,
		Dropped: s.Dropped, DroppedEvents: s.DroppedEvents, UnsupportedTypes: s.UnsupportedTypes, Refused: s.Refused,
		Connected: s.Connected}
}

// kvEventsFlags are the flags of kvEvents.
type kvEventsFlags struct {
	srcs          kvSourcesFlag
	topic         string
	fromStart     bool
	count         uint64
	replayTimeout time.Duration
	version       *vllm.Release // both event forms and replay framings are always accepted
	live          *livenessFlags
	mo            *metricsOptions
	curve         *curveClientFlags
	allow         *allowFlag
}

// kvEventsCmd is the kvEvents command.
var kvEventsCmd = command[kvEventsFlags]{
	spec: kvEventsSpec,
	register: func(fs *flag.FlagSet, fl *kvEventsFlags) {
		fs.Var(kvSourceFlag{f: &fl.srcs}, "connect", "publisher live endpoint to dial, e.g. tcp://10.0.0.5:5557 (repeatable)")
		fs.Var(kvSourceFlag{f: &fl.srcs, bind: true}, "bind", "endpoint to bind for a publisher that connects (repeatable)")
		fs.Var(kvReplayFlag{f: &fl.srcs}, "replay", "replay endpoint of the --connect (or --bind) before it")
		fs.StringVar(&fl.topic, "topic", "", "subscription topic prefix (vLLM's KVEventsConfig.topic)")
		fs.BoolVar(&fl.fromStart, "from-start", false, "replay from sequence 0 on joining instead of starting at the first batch seen")
		fs.Uint64Var(&fl.count, "count", 0, "exit after this many events (0: on SIGINT/SIGTERM)")
		fs.DurationVar(&fl.replayTimeout, "replay-timeout", kvevents.DefaultReplayTimeout, "give a replay up after this long without a reply")
		fl.version = releaseFlag(fs)
		fl.live = addLivenessFlags(fs)
		fl.mo = addMetricsFlags(fs)
		fl.curve = addCurveClientFlags(fs)
		fl.allow = addAllowFlag(fs)
	},
	run: runKVEvents,
}

// runKVEvents is the run function of kvEvents: it checks the flags and
// the arguments (e.args), then does the work.
func runKVEvents(ctx context.Context, fl *kvEventsFlags, e *env) error {
	if len(e.args) > 0 {
		return usagef("unexpected argument %q", e.args[0])
	}
	if len(fl.srcs.list) == 0 {
		return usagef("at least one --connect or --bind is required")
	}
	if fl.replayTimeout <= 0 {
		return usagef("--replay-timeout must be positive")
	}
	if err := fl.live.check(); err != nil {
		return err
	}
	if err := fl.mo.check(); err != nil {
		return err
	}
	cc, err := fl.curve.config(e.logger)
	if err != nil {
		return err
	}
	sopts := fl.live.options()
	sopts.Guard.Curve = cc
	sopts.Guard.Allow = fl.allow.prefixes // a --bind source's accepted publishers
	rel := *fl.version
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr := &kvPrinter{w: bufio.NewWriterSize(e.stdout, 64<<10), count: fl.count, done: cancel}
	sub, err := kvevents.NewSubscriber(kvevents.Config{Release: rel, Handler: pr.handle, Topic: fl.topic,
		FromStart: fl.fromStart, ReplayTimeout: fl.replayTimeout, Logger: e.logger, Socket: sopts})
	if err != nil {
		return err
	}
	defer sub.Close()
	for _, s := range fl.srcs.list {
		if err := sub.Add(s); err != nil {
			return err
		}
		e.logger.Info("kv-events following", "source", s.Name, "endpoint", sub.Endpoint(s.Name), "bind", s.Bind, "replay", s.Replay)
	}
	ms, err := startMetrics(fl.mo, e.logger, func(c *zgprom.Collector) error { return c.AddKVEvents("kv-events", 0, sub) })
	if err != nil {
		return err
	}
	defer ms.Close()
	if err := sub.Run(rctx); err != nil {
		return err
	}
	st := sub.Stats()
	var line kvCountersLine
	line.Counters.Sources = make(map[string]kvCounters, len(st.Sources))
	for _, s := range st.Sources {
		line.Counters.Sources[s.Name] = toCounters(s)
	}
	line.Counters.Total = toCounters(st.Total)
	out, err := json.Marshal(line)
	if err != nil {
		return err
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.w.Write(out)
	pr.w.WriteByte('\n')
	if err := pr.w.Flush(); err != nil {
		return err
	}
	return pr.err
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
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, Medium: kvevents.String("GPU")}
		if i > 0 {
			ev.ParentBlockHash = kvevents.OptHash{V: kvevents.IntHash(kvBlockHash(base - 1)), Valid: true}
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
		evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.String("GPU"),
			BlockHashes: []kvevents.Hash{kvevents.IntHash(kvBlockHash((n - 1) * uint64(stored) * 4))}})
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
	dp         int
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
		fs.IntVar(&fl.dp, "dp-rank", 0, "data_parallel_rank (offsets the ports as vLLM does)")
		fl.version = releaseFlag(fs)
		fl.curve = addCurveServerFlags(fs)
		fl.allow = addAllowFlag(fs)
	},
	run: runKVPublish,
}

// runKVPublish is the run function of kvPublish: it checks the flags and
// the arguments (e.args), then does the work.
func runKVPublish(ctx context.Context, fl *kvPublishFlags, e *env) error {
	if len(e.args) > 0 {
		return usagef("unexpected argument %q", e.args[0])
	}
	if fl.bind == "" {
		return usagef("--bind is required")
	}
	if fl.rate < 0 || fl.stored < 0 || fl.dp < 0 {
		return usagef("--rate, --stored and --dp-rank must not be negative")
	}
	cc, stopCurve, err := fl.curve.config(ctx, e.logger)
	if err != nil {
		return err
	}
	defer stopCurve()
	var sopts socket.Options
	sopts.Guard.Curve = cc
	sopts.Guard.Allow = fl.allow.prefixes // live and replay ports
	rel := *fl.version
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Release: rel, Endpoint: fl.bind, Bind: true,
		ReplayEndpoint: fl.replayBind, Topic: fl.topic, DataParallelRank: fl.dp, Logger: e.logger, Socket: sopts})
	if err != nil {
		return err
	}
	defer pub.Close()
	e.logger.Info("kv-publish", "endpoint", pub.Endpoint(), "replay", pub.ReplayEndpoint(), "rate", fl.rate,
		"count", fl.count, "vllm", rel.String())
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
		evs = kvSynthetic(n, fl.stored, evs)
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
