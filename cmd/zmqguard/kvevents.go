package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/vllm"
)

var kvEventsSpec = commandSpec{
	name:     "kv-events",
	synopsis: "--connect ADDR [--replay ADDR] [--engine vllm|sglang] [--connect ADDR [--replay ADDR]]... [--bind ADDR] [--fan-in ADDR [--fan-in-replay TEMPLATE]]... [--fan-in-any-address] [--engine-ttl D] [--sources-dns tcp://NAME:PORT[,replay=PORT]]... [--dns-interval D] [--sources-file FILE] [--allow CIDR,...] [--any-peer] [--topic T] [--from-start] [--count N] [--curve-server-key Z85 [--curve-secret-key-file F]]",
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
exclusive; A = B after a reconnect whose continuity with the last batch
could not be proven: what was printed for that source may be stale).

Each --replay belongs to the --connect (or --bind) before it: a gap in that
source's sequence is then recovered from the publisher's replay endpoint
(a DEALER request, bounded by --replay-timeout of silence). --bind listens
for a publisher that connects (vLLM connects when its endpoint names a
host); on an address beyond loopback it needs --allow or CURVE keys
(else the first peer to connect would speak for the engine), or --any-peer.
--from-start replays from sequence 0 on joining, instead of starting
at the first batch seen.

--fan-in binds one endpoint that any number of engines connect to, as
llm-d deploys vLLM (each engine's topic kv@{pod ip}@{model}): each topic is
its own source, named by the topic, with its own sequence, replay and
resets. --fan-in-replay tcp://{host}:5558 derives each engine's replay
endpoint from its topic. A topic is its first connection's while that
connection lives, and a topic naming an IP address is accepted only from
that address (--fan-in-any-address turns that off). An engine whose
connection has been gone for --engine-ttl (default 10m) is retired:
{"source": TOPIC, "type": "departed"}.

--sources-dns tcp://NAME:PORT[,replay=PORT] (repeatable) follows every
address NAME resolves to (A and AAAA, every --dns-interval, default 10s; a
Kubernetes headless service answers with its ready pods): a failed lookup
changes nothing, an NXDOMAIN or empty answer removes the engines only
after 3 lookups in a row. --sources-file FILE follows the engines a file
lists, one "LIVE [REPLAY]" per line (# comments), re-read when it changes,
also when replaced by a rename; a bad line is logged with its number and
the others apply. Each is named by its live endpoint (issue 36).

--engine sglang, after a --connect (or --bind), says that source is an
SGLang engine: elements an event array holds after SGLang's own fields are
read past and counted (unknown_fields), never read as vLLM's fields at
those positions; before every --connect and --bind it is every source's
default. Both engines' hashes, pairs and replay framings decode either way.

--curve-server-key (the publisher's public key, Z85) makes every SUB and
replay DEALER speak CURVE as the client, with the key pair of
--curve-secret-key-file (a .key_secret certificate the publisher admits) or,
without it, a fresh key pair that only a publisher admitting any key lets in.

After --count events (or on SIGINT/SIGTERM) the last stdout line is
{"counters": {...}} with per-source and total batches, events, gaps,
replayed, lost, resets, drops by reason, and the names of event types this
release does not know (dropped as "unsupported"); the exit code is 0.`,
}

// kvSourcesFlag collects --connect/--bind/--replay/--engine in order, and
// --any-peer (kvevents.Config.AnyPeer: a --bind beyond loopback without
// --allow or CURVE keys).
type kvSourcesFlag struct {
	list    []kvevents.Source
	anyPeer bool
	// engine is an --engine given before any --connect or --bind: the
	// engine of every source that names none (sources).
	engine string
	// fanInAnyAddress and engineTTL are --fan-in-any-address and
	// --engine-ttl (fanin.go).
	fanInAnyAddress bool
	engineTTL       time.Duration
}

// engineUsage is --engine's help, shared by kv-events and kv-index.
const engineUsage = "engine publishing the --connect (or --bind) before it: vllm or sglang (kvevents.Source.Engine; how an event's elements after the engines' shared fields are read); before any --connect or --bind, every source's default (default vllm)"

// sources returns the sources, each naming its engine: its own --engine,
// else the one given before every source.
func (f *kvSourcesFlag) sources() []kvevents.Source {
	out := append([]kvevents.Source(nil), f.list...)
	for i := range out {
		if out[i].Engine == "" {
			out[i].Engine = f.engine
		}
	}
	return out
}

// kvEngineFlag is --engine: vllm or sglang, for the --connect or --bind
// before it, or, before any, for every source.
type kvEngineFlag struct{ f *kvSourcesFlag }

func (v kvEngineFlag) String() string { return "" }

func (v kvEngineFlag) Set(s string) error {
	if s != "vllm" && s != "sglang" {
		return errors.New("want vllm or sglang") // the flag package names the flag and the value
	}
	if len(v.f.list) == 0 {
		if v.f.engine != "" {
			return fmt.Errorf("--engine %s already given before the sources", v.f.engine)
		}
		v.f.engine = s
		return nil
	}
	last := &v.f.list[len(v.f.list)-1]
	if last.Engine != "" {
		return fmt.Errorf("%s already has --engine %s", last.Name, last.Engine)
	}
	last.Engine = s
	return nil
}

// anyPeerUsage is --any-peer's help, shared by kv-events and kv-index.
const anyPeerUsage = "let a --bind on an address beyond loopback admit any publisher without --allow or CURVE keys (by default refused: the first peer to connect would speak for the engine)"

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
	if last.FanIn {
		return fmt.Errorf("--fan-in %s takes --fan-in-replay, not --replay", last.Live)
	}
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
	case kvevents.UpdateDeparted:
		b = append(b, `{"source": `...)
		b = appendJSONString(b, u.Source)
		b = append(b, `, "type": "departed"}`+"\n"...)
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
	Batches      uint64 `json:"batches"`
	Events       uint64 `json:"events"`
	EventsByType struct {
		BlockStored      uint64 `json:"block_stored"`
		BlockRemoved     uint64 `json:"block_removed"`
		AllBlocksCleared uint64 `json:"all_blocks_cleared"`
		BlockInactive    uint64 `json:"block_inactive"`
	} `json:"events_by_type"`
	// UnknownFields is kvevents.SourceStats': what the decoder read past
	// (fields a later engine release added).
	UnknownFields uint64 `json:"unknown_fields"`
	Gaps          uint64 `json:"gaps"`
	Replayed      uint64 `json:"replayed"`
	Lost          uint64 `json:"lost"`
	Resets        uint64 `json:"resets"`
	// ResetsBy, ContinuityProven, Unproven and Holder are
	// kvevents.SourceStats' (issue 35): resets by cause, new connections
	// proven or not, and a bound source's slot holder.
	ResetsBy struct {
		SeqBack uint64 `json:"seq_back"`
		Digest  uint64 `json:"digest"`
		Jump    uint64 `json:"jump"`
		Resync  uint64 `json:"resync"`
	} `json:"resets_by"`
	ContinuityProven uint64 `json:"continuity_proven"`
	Unproven         uint64 `json:"unproven"`
	Holder           struct {
		Addr    string    `json:"addr"`
		Since   time.Time `json:"since"`
		Batches uint64    `json:"batches"`
	} `json:"holder,omitzero"`
	Dropped       decodeguard.Counts `json:"dropped"`
	DroppedEvents decodeguard.Counts `json:"dropped_events"`
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
	return kvCounters{Batches: s.Batches,
		Events:       s.Events.BlockStored + s.Events.BlockRemoved + s.Events.AllBlocksCleared + s.Events.BlockInactive,
		EventsByType: s.Events, UnknownFields: s.UnknownFields, Gaps: s.Gaps, Replayed: s.Replayed, Lost: s.Lost, Resets: s.Resets,
		Dropped: s.Dropped, DroppedEvents: s.DroppedEvents, UnsupportedTypes: s.UnsupportedTypes, Refused: s.Refused,
		Connected: s.Connected, ResetsBy: s.ResetsBy, ContinuityProven: s.ContinuityProven, Unproven: s.Unproven,
		Holder: s.Holder}
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
	disc          *discoveryFlags
}

// kvEventsCmd is the kvEvents command.
var kvEventsCmd = command[kvEventsFlags]{
	spec: kvEventsSpec,
	register: func(fs *flag.FlagSet, fl *kvEventsFlags) {
		fs.Var(kvSourceFlag{f: &fl.srcs}, "connect", "publisher live endpoint to dial, e.g. tcp://10.0.0.5:5557 (repeatable)")
		fs.Var(kvSourceFlag{f: &fl.srcs, bind: true}, "bind", "endpoint to bind for a publisher that connects (repeatable)")
		fs.Var(kvReplayFlag{f: &fl.srcs}, "replay", "replay endpoint of the --connect (or --bind) before it")
		fs.Var(kvEngineFlag{f: &fl.srcs}, "engine", engineUsage)
		fs.BoolVar(&fl.srcs.anyPeer, "any-peer", false, anyPeerUsage)
		addFanInFlags(fs, &fl.srcs)
		fs.StringVar(&fl.topic, "topic", "", "subscription topic prefix (vLLM's KVEventsConfig.topic)")
		fs.BoolVar(&fl.fromStart, "from-start", false, "replay from sequence 0 on joining instead of starting at the first batch seen")
		fs.Uint64Var(&fl.count, "count", 0, "exit after this many events (0: on SIGINT/SIGTERM)")
		fs.DurationVar(&fl.replayTimeout, "replay-timeout", 10*time.Second, "give a replay up after this long without a reply")
		fl.version = releaseFlag(fs)
		fl.live = addLivenessFlags(fs)
		fl.mo = addMetricsFlags(fs)
		fl.curve = addCurveClientFlags(fs)
		fl.allow = addAllowFlag(fs)
		fl.disc = addDiscoveryFlags(fs)
	},
	run: runKVEvents,
}

// runKVEvents is the run function of kvEvents: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runKVEvents(ctx context.Context, fl *kvEventsFlags, e *env) error {
	if len(fl.srcs.list) == 0 && !fl.disc.any() {
		return usagef("at least one --connect, --bind, --fan-in, --sources-dns or --sources-file is required")
	}
	if err := fl.disc.check(); err != nil {
		return err
	}
	if fl.replayTimeout <= 0 {
		return badFlag("--replay-timeout", fl.replayTimeout, "want a positive duration")
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
	fl.allow.apply(&sopts.Guard) // a --bind source's accepted publishers
	rel := *fl.version
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr := &kvPrinter{w: bufio.NewWriterSize(e.stdout, 64<<10), count: fl.count, done: cancel}
	kcfg := kvevents.Config{Release: rel, Handler: pr.handle, Topic: fl.topic,
		FromStart: fl.fromStart, ReplayTimeout: fl.replayTimeout, Logger: e.logger, Socket: sopts, AnyPeer: fl.srcs.anyPeer}
	fl.srcs.applyFanIn(&kcfg)
	sub, err := kvevents.NewSubscriber(kcfg)
	if err != nil {
		return err
	}
	defer sub.Close()
	memLimit, restoreLimit := setMemoryLimit(kvEventsMemLimit(sopts.Guard.MaxMessageSize)) // issue 37: RSS near the budget
	defer restoreLimit()
	e.logger.Info("kv-events memory", "memory_limit", memLimit, "gomemlimit_env", memLimit == 0)
	for _, s := range fl.srcs.sources() {
		if err := sub.Add(s); err != nil {
			return err
		}
		e.logger.Info("kv-events following", "source", s.Name, "endpoint", sub.Endpoint(s.Name), "bind", s.Bind, "replay", s.Replay,
			"fan_in", s.FanIn, "fan_in_replay", s.ReplayTemplate,
			"engine", cmp.Or(s.Engine, "vllm"))
	}
	ms, err := startMetrics(fl.mo, e.logger, func(c *zgprom.Collector) error { return c.AddKVEvents("kv-events", 0, sub) })
	if err != nil {
		return err
	}
	defer ms.Close()
	waitDiscovery := followDiscovery(rctx, sub, fl.disc.discoverers(e.logger, fl.srcs.engine, nil), e.logger, cancel)
	err = sub.Run(rctx)
	cancel()
	if derr := waitDiscovery(); err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	st := sub.Stats()
	var line kvCountersLine
	line.Counters.Sources = make(map[string]kvCounters, len(st.Sources))
	for _, s := range st.Sources {
		line.Counters.Sources[s.Name] = toCounters(s)
	}
	line.Counters.Total = toCounters(st)
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
