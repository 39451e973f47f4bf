package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/redisstore"
	"github.com/zmqguard/zmqguard/kvindex/vllmhash"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
)

var kvIndexSpec = commandSpec{
	name:     "kv-index",
	synopsis: "--connect ADDR [--replay ADDR] [--engine vllm|sglang] [--connect ADDR [--replay ADDR]]... [--bind ADDR] [--fan-in ADDR [--fan-in-replay TEMPLATE]]... [--fan-in-any-address] [--engine-ttl D] [--sources-dns tcp://NAME:PORT[,replay=PORT]]... [--dns-interval D] [--sources-file FILE] [--allow CIDR,...] [--redis URL [--redis-shards N] | --snapshot FILE [--snapshot-interval D]] --http HOST:PORT [--model M] [--capacity N]",
	summary:  "a KV-cache index of vLLM engines, scored over HTTP (POST /score)",
	help: `Follows the KV-event publishers of vLLM engines like kv-events (same
--connect/--bind/--replay/--engine/--topic/--from-start flags; each source is one
engine, named by its endpoint) and keeps an index of which engine holds
which prefix of which prompt, on which tier (package kvindex). A publisher
restart clears its engine; a range of events that could not be recovered
makes its engine's entries uncertain until stored again, so they are never
reported as certain hits. Unlike kv-events, kv-index replays every source
from the start by default (what each publisher still holds), so that an
index started after its engines learns what they hold; --from-start=false
starts at the first batch seen.

--snapshot FILE keeps the in-memory index across restarts: it is loaded at
start (a corrupt, truncated, foreign or newer file is refused with one
line, and the index starts empty), written every --snapshot-interval
(default 1m) and on exit, atomically. Each source then resumes from the
last batch applied: exact where the publisher still holds the batches
since (the subscriber proves it is the same run first), uncertain where it
does not, cleared where the engine restarted meanwhile (with discovery,
one not found again within --engine-ttl is retired). With --redis the
positions live in Redis, and a restarted kv-index (or a new replica)
resumes the same way. A Redis that lost its data (a restart without
persistence, FLUSHALL) is noticed: one ERROR line, index.BackendLosses
counted, and every source replayed from the start as after a restart.
--redis URL with no --connect or --bind is a read-only replica serving
/score from the shared index.

Sources can also be found while running (issue 36): --sources-dns
tcp://NAME:PORT[,replay=PORT] (repeatable) follows every address NAME
resolves to (A and AAAA, every --dns-interval, default 10s; a Kubernetes
headless service answers with its ready pods, no API access needed): a
failed lookup changes nothing, an NXDOMAIN or empty answer retires the
engines only after 3 lookups in a row. --sources-file FILE follows the
engines a file lists, one "LIVE [REPLAY]" per line (# comments), re-read
when it changes, also when replaced by a rename (editors, ConfigMap
mounts); a bad line is logged with its number and the others apply. Each
discovered source is named by its live endpoint; one that leaves is
removed and its engine retired (kv-index drops its entries, counted in
index.departed).

--http HOST:PORT (required; loopback unless --http-allow-remote; port 0
picks a free port, logged as http_addr) serves:

  POST /score    {"tokens": [ids...], "lora": "name"?, "model": "m"?,
                  "block_size": N?, "engines": ["name"...]?}
                 -> {"model", "prompt_blocks", "best": ENGINE|null,
                     "engines": [ENGINE...], "unknown_model": true?}
                 "engines" in the request: the candidate engines (a router
                 scores the engines it may route to; others are left out).
                 unknown_model: no engine serves the request's model
                 (--model), so an empty answer says nothing (counted in
                 http.unknown_model).
                 ENGINE = {"engine", "block_size", "blocks", "tokens",
                   "maybe_blocks", "maybe_tokens", "tiers": [{"medium",
                   "blocks", "tokens", "maybe_blocks", "maybe_tokens"}]}
                 blocks/tokens: the prefix the engine certainly holds on
                 any medium (a GPU hit continued from CPU or storage) and,
                 under tiers, on each medium alone; maybe_* also count
                 blocks that may be gone (stored before a lost range).
                 Engines by most certain tokens; best is the first when it
                 certainly holds a block.
  GET /stats     the index's and the sources' counters (JSON)
  GET /metrics   Prometheus text: the subscriber's source families
                 (zmqguard_source_*) and the index's (zmqguard_kvindex_*),
                 both under loop="kv-index", the /score request counts
                 (zmqguard_http_score_requests_total{result}) and the Go
                 runtime's and the process's

--model names the model every engine serves (requests without "model" get
it); --block-size is the block size scored before any store names one.

--vllm-hash sha256_cbor|sha256 --pythonhashseed S --block-size N is
vLLM-key mode (package kvindex/vllmhash): blocks are keyed by the hashes
the engines publish, and /score hashes the prompt with vLLM's function, so
every engine must run with that --prefix-caching-hash-algo, PYTHONHASHSEED
and block size (one model). The default keys blocks by the index's own
hashes of the token ids in each BlockStored and has no such requirement.

--redis URL (redis://host:port/db or unix:///path/redis.sock) keeps the
index in Redis/Valkey instead of memory, shared with other kv-index
processes using the same --redis-prefix and --seed. For a Redis Cluster
give seed addresses, redis://host:port,host:port,...: cluster mode is
detected by itself. --redis-shards N (1..256) splits the index by engine
into N slots (default: 1 on a single server, 16 on a cluster; the same on
every process sharing an index; docs/kv-index.md). --redis-lease makes this
process take a writer lease per engine: another process following the same
engines then only reads, and takes over (entries made uncertain first) when
this one stops renewing for --redis-lease-ttl. --share-ingest (implies
--redis-lease) splits the same --connect engines between the replicas by
their leases instead (docs/kv-index.md).

On SIGINT/SIGTERM the last stdout line is {"counters": {...}} with the
index's counters, the backend's gauges, per-source counters and the HTTP
request counts; the exit code is 0.`,
}

// kvIndexHTTP counts the HTTP side.
type kvIndexHTTP struct {
	Scores      uint64 `json:"scores"`
	BadRequests uint64 `json:"bad_requests"`
	Failures    uint64 `json:"failures"`
	// UnknownModel counts scores of a model no engine serves.
	UnknownModel uint64 `json:"unknown_model"`
}

// kvIndexServer is the --http endpoint's handlers.
type kvIndexServer struct {
	x                     *kvindex.Index
	vllmKeys              bool // vLLM-key mode (--vllm-hash)
	vxBlockSize           int
	sub                   *kvevents.Subscriber
	store                 kvindex.Backend // nil: memory
	share                 *kvShare        // --share-ingest, else nil
	sources               []kvevents.Source
	resyncMu              sync.Mutex
	ready                 bool // sub and sources set
	lostPending           bool // the backend was lost before ready
	model                 string
	logger                *slog.Logger
	applyErrors           atomic.Uint64
	scores, bad, failures atomic.Uint64
	unknownModel          atomic.Uint64
	retire                *snapRetire // set before Run when armed (kvindex_retire.go)
}

func (s *kvIndexServer) writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func (s *kvIndexServer) fail(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusBadRequest {
		s.bad.Add(1)
	} else {
		s.failures.Add(1)
	}
	s.writeJSON(w, code, map[string]string{"error": msg})
}

// score serves POST /score.
func (s *kvIndexServer) score(w http.ResponseWriter, r *http.Request) {
	// Decoded as it is read (kvindex_body.go), tokens at their count.
	req, err := decodeScoreBody(http.MaxBytesReader(w, r.Body, kvIndexMaxBody), kvindex.MaxScoreTokens)
	if err != nil {
		var tooBig *http.MaxBytesError
		var tooMany *scoreTooManyTokens
		switch {
		case errors.As(err, &tooBig):
			s.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", kvIndexMaxBody))
		case errors.As(err, &tooMany):
			s.fail(w, http.StatusBadRequest, tooMany.Error())
		default:
			s.fail(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		}
		return
	}
	if req.BlockSize < 0 || req.BlockSize > kvindex.MaxBlockSize {
		s.fail(w, http.StatusBadRequest, fmt.Sprintf("block_size %d out of range 0..%d", req.BlockSize, kvindex.MaxBlockSize))
		return
	}
	model := s.model
	if req.Model != nil {
		model = *req.Model
	}
	var res kvindex.ScoreResult
	if s.vllmKeys {
		// vLLM-key mode: one model, the engines' block size.
		if model != s.model || req.BlockSize != 0 && req.BlockSize != s.vxBlockSize {
			s.fail(w, http.StatusBadRequest, fmt.Sprintf("vLLM-key mode indexes model %q in blocks of %d only", s.model, s.vxBlockSize))
			return
		}
		res, err = s.x.Score(kvindex.ScoreRequest{Model: model, Tokens: req.Tokens, LoraName: req.Lora, BlockSize: s.vxBlockSize,
			Engines: req.Engines})
	} else {
		res, err = s.x.Score(kvindex.ScoreRequest{Model: model, Tokens: req.Tokens, LoraName: req.Lora, BlockSize: req.BlockSize,
			Engines: req.Engines})
	}
	if err != nil {
		if errors.Is(err, kvindex.ErrClosed) {
			s.fail(w, http.StatusServiceUnavailable, "index closed")
			return
		}
		s.logger.Warn("kv-index score failed", "err", err)
		s.fail(w, http.StatusServiceUnavailable, "score failed: "+err.Error())
		return
	}
	s.scores.Add(1)
	if res.UnknownModel {
		s.unknownModel.Add(1)
	}
	s.writeJSON(w, http.StatusOK, toScoreResponse(model, res))
}

// kvIndexCounters is the exit line's and /stats' body.
type kvIndexCounters struct {
	Index       *kvindex.Stats        `json:"index,omitempty"`
	VLLMKeys    *kvindex.Stats        `json:"vllm_key_index,omitempty"`
	ApplyErrors uint64                `json:"apply_errors"`
	HTTP        kvIndexHTTP           `json:"http"`
	Redis       *redisstore.Stats     `json:"redis,omitempty"`
	Share       *kvShareStats         `json:"share,omitempty"`
	Sources     map[string]kvCounters `json:"sources"`
	Total       kvCounters            `json:"total"`
}

func (s *kvIndexServer) counters() kvIndexCounters {
	c := kvIndexCounters{ApplyErrors: s.applyErrors.Load(),
		HTTP: kvIndexHTTP{Scores: s.scores.Load(), BadRequests: s.bad.Load(), Failures: s.failures.Load(),
			UnknownModel: s.unknownModel.Load()}}
	if s.vllmKeys {
		st := s.x.Stats()
		c.VLLMKeys = &st
	} else {
		st := s.x.Stats()
		c.Index = &st
	}
	if s.store != nil {
		st, _ := redisstore.StatsOf(s.store)
		c.Redis = &st
	}
	c.Share = s.share.stats()
	st := s.sub.Stats()
	c.Sources = make(map[string]kvCounters, len(st.Sources))
	for _, so := range st.Sources {
		c.Sources[so.Name] = toCounters(so)
	}
	c.Total = toCounters(st)
	return c
}

// resume sets each source's Resume from the index's positions (a
// snapshot's or the shared store's). A source the index may hold entries
// of but has no position for (kept: a snapshot or a shared store) has them
// made uncertain: its continuity cannot be proven. With retire (an index
// of its own), an engine of the snapshot no longer followed is cleared.
func (s *kvIndexServer) resume(list []kvevents.Source, kept, retire bool) {
	pos := s.x.Positions()
	followed := map[string]bool{}
	for i := range list {
		if list[i].FanIn {
			continue // its engines (topics) are not known yet: not resumed
		}
		followed[list[i].Name] = true
		if p, ok := pos[list[i].Name]; ok {
			list[i].Resume = &p
		} else if kept {
			if err := s.x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: list[i].Name}); err != nil {
				s.logger.Warn("kv-index: making a source's kept entries uncertain failed", "source", list[i].Name, "err", err)
			}
		}
	}
	if !retire {
		return
	}
	for name := range pos {
		if !followed[name] {
			s.logger.Info("kv-index: an engine of the snapshot is no longer followed; its entries are dropped", "source", name)
			s.x.Apply(kvevents.Update{Kind: kvevents.UpdateReset, Source: name})
		}
	}
}

// resyncAll is the index's OnBackendLost: the shared store lost its data,
// so every source is replayed from the start as after a restart (the
// subscriber's next update of each is a reset). It runs in a goroutine of
// the index's, never inside the Handler.
func (s *kvIndexServer) resyncAll() {
	s.resyncMu.Lock()
	if !s.ready {
		s.lostPending = true // resynced once the sources are added
		s.resyncMu.Unlock()
		return
	}
	s.resyncMu.Unlock()
	for _, so := range s.sub.Stats().Sources { // discovered sources too
		if err := s.sub.Resync(so.Name); err != nil {
			s.logger.Warn("kv-index: resync after the shared index's loss failed", "source", so.Name, "err", err)
		}
	}
}

// handle feeds the index. A failed apply (a Redis error) leaves the
// engine's entries in doubt: they are made uncertain (best effort) and
// counted; the subscriber goes on.
func (s *kvIndexServer) handle(_ context.Context, u kvevents.Update) error {
	if r := s.retire; r != nil && r.pending.Load() {
		r.note(u.Source)
	}
	apply := func(u kvevents.Update) error {
		return s.x.Apply(u)
	}
	if err := apply(u); err != nil && !errors.Is(err, kvindex.ErrClosed) {
		s.applyErrors.Add(1)
		apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: u.Source})
	}
	return nil
}

// handler returns the --http mux.
func (s *kvIndexServer) handler() (http.Handler, error) {
	c := zgprom.NewCollector(nil)
	if err := c.AddKVEvents("kv-index", 0, s.sub); err != nil {
		return nil, err
	}
	if s.x != nil {
		if err := c.AddKVIndex("kv-index", s.x); err != nil {
			return nil, err
		}
	}
	reg := prometheus.NewRegistry()
	for _, col := range []prometheus.Collector{c, newKVIndexHTTPCollector(s),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /score", s.score)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { s.writeJSON(w, http.StatusOK, s.counters()) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             metricsScrapeTimeout,
	}))
	return mux, nil
}

// kvIndexHTTPCollector exports the /score request counts (the index's own
// families come from metrics.Set.AddKVIndex).
type kvIndexHTTPCollector struct {
	s    *kvIndexServer
	desc *prometheus.Desc
}

func newKVIndexHTTPCollector(s *kvIndexServer) *kvIndexHTTPCollector {
	return &kvIndexHTTPCollector{s: s, desc: prometheus.NewDesc("zmqguard_http_score_requests_total",
		"kv-index POST /score requests, by result (scored, bad_request, failed; unknown_model: scored for a model no engine serves)", []string{"result"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *kvIndexHTTPCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *kvIndexHTTPCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range []struct {
		result string
		v      uint64
	}{{"scored", c.s.scores.Load()}, {"bad_request", c.s.bad.Load()}, {"failed", c.s.failures.Load()},
		{"unknown_model", c.s.unknownModel.Load()}} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(r.v), r.result)
	}
}

// kvIndexFlags are the flags of kvIndex.
type kvIndexFlags struct {
	srcs          kvSourcesFlag
	topic         string
	fromStart     bool
	replayTimeout time.Duration
	httpAddr      string
	httpRemote    bool
	model         string
	blockSize     int
	capacity      int
	seed          uint64
	redisURL      string
	redisPrefix   string
	redisLease    bool
	share         bool
	redisShards   int
	leaseTTL      time.Duration
	snapshot      string
	snapInterval  time.Duration
	vllmHash      string
	hashSeed      string
	live          *livenessFlags
	curve         *curveClientFlags
	allow         *allowFlag
	disc          *discoveryFlags
}

// kvIndexCmd is the kvIndex command.
var kvIndexCmd = command[kvIndexFlags]{
	spec: kvIndexSpec,
	register: func(fs *flag.FlagSet, fl *kvIndexFlags) {
		fs.Var(kvSourceFlag{f: &fl.srcs}, "connect", "publisher live endpoint to dial, e.g. tcp://10.0.0.5:5557 (repeatable)")
		fs.Var(kvSourceFlag{f: &fl.srcs, bind: true}, "bind", "endpoint to bind for a publisher that connects (repeatable)")
		fs.Var(kvReplayFlag{f: &fl.srcs}, "replay", "replay endpoint of the --connect (or --bind) before it")
		fs.Var(kvEngineFlag{f: &fl.srcs}, "engine", engineUsage)
		fs.BoolVar(&fl.srcs.anyPeer, "any-peer", false, anyPeerUsage)
		addFanInFlags(fs, &fl.srcs)
		fs.StringVar(&fl.topic, "topic", "", "subscription topic prefix (vLLM's KVEventsConfig.topic)")
		fs.BoolVar(&fl.fromStart, "from-start", true, "replay each source from the start (what its publisher still holds) on joining; --from-start=false starts at the first batch seen")
		fs.DurationVar(&fl.replayTimeout, "replay-timeout", 10*time.Second, "give a replay up after this long without a reply")
		fs.StringVar(&fl.httpAddr, "http", "", "serve POST /score, /stats and /metrics over HTTP on this `host:port` (required; loopback only)")
		fs.BoolVar(&fl.httpRemote, "http-allow-remote", false, "allow an --http host that is not loopback")
		fs.StringVar(&fl.model, "model", "", "the model every engine serves (a /score request without \"model\" gets it)")
		fs.IntVar(&fl.blockSize, "block-size", 0, "block size to score with before any store names one (0: kvindex's default, 16)")
		fs.IntVar(&fl.capacity, "capacity", 0, "most (block, engine, tier, group) entries held; the oldest are evicted (0: 4194304)")
		fs.Uint64Var(&fl.seed, "seed", 0, "local-key seed; every process sharing a --redis index must use the same (0: kvindex's default)")
		fs.StringVar(&fl.redisURL, "redis", "", "keep the index in Redis/Valkey: redis://host:port/db, unix:///path/redis.sock, or a cluster's seeds redis://host:port,host:port,... (default: in memory)")
		fs.StringVar(&fl.redisPrefix, "redis-prefix", "", "key prefix of the index in Redis (empty: {zmqguard-kvindex}:)")
		fs.Var(redisShardsFlag{&fl.redisShards}, "redis-shards", "split the Redis index by engine into `N` shards, 1..256 (default: 1 on a single server, 16 on a Redis Cluster)")
		fs.BoolVar(&fl.redisLease, "redis-lease", false, "take a writer lease per engine in Redis (one writer per engine across processes)")
		fs.BoolVar(&fl.share, "share-ingest", false, kvShareUsage)
		fs.DurationVar(&fl.leaseTTL, "redis-lease-ttl", 0, "how long a writer lease outlives its last renewal (0: 10s)")
		fs.StringVar(&fl.snapshot, "snapshot", "", "keep the in-memory index in this `file` across restarts: loaded at start, written periodically and on exit; sources resume from it")
		fs.DurationVar(&fl.snapInterval, "snapshot-interval", 0, "how often --snapshot is written (0: 1m)")
		fs.StringVar(&fl.vllmHash, "vllm-hash", "", "vLLM-key mode: key blocks by the engines' own hashes, computed for /score with this `function` (sha256_cbor or sha256; needs --block-size and --pythonhashseed)")
		fs.StringVar(&fl.hashSeed, "pythonhashseed", "", "the engines' PYTHONHASHSEED (vLLM-key mode)")
		fl.live = addLivenessFlags(fs)
		fl.curve = addCurveClientFlags(fs)
		fl.allow = addAllowFlag(fs)
		fl.disc = addDiscoveryFlags(fs)
	},
	run: runKVIndex,
}

// runKVIndex is the run function of kvIndex: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runKVIndex(ctx context.Context, fl *kvIndexFlags, e *env) error {
	if len(fl.srcs.list) == 0 && !fl.disc.any() && fl.redisURL == "" {
		return usagef("at least one --connect, --bind, --fan-in, --sources-dns or --sources-file is required (or --redis URL alone: a read-only replica of a shared index)")
	}
	if err := cmp.Or(fl.disc.check(), fl.checkShare()); err != nil {
		return err
	}
	if fl.redisURL == "" {
		switch {
		case fl.redisLease:
			return usagef("--redis-lease needs --redis")
		case fl.redisPrefix != "":
			return usagef("--redis-prefix %q needs --redis", fl.redisPrefix)
		case fl.redisShards != 0:
			return usagef("--redis-shards %d needs --redis", fl.redisShards)
		case fl.leaseTTL != 0:
			return usagef("--redis-lease-ttl needs --redis")
		}
	} else if fl.snapshot != "" {
		return usagef("--snapshot keeps an in-memory index; with --redis the index and its positions live in Redis")
	}
	if fl.snapInterval < 0 {
		return usagef("--snapshot-interval %v is negative", fl.snapInterval)
	}
	if fl.snapInterval != 0 && fl.snapshot == "" {
		return usagef("--snapshot-interval needs --snapshot")
	}
	var hasher *vllmhash.Hasher
	if fl.vllmHash != "" {
		if fl.vllmHash != "sha256_cbor" && fl.vllmHash != "sha256" {
			return badFlag("--vllm-hash", fl.vllmHash, "want sha256_cbor or sha256")
		}
		if fl.blockSize == 0 || fl.hashSeed == "" {
			return usagef("--vllm-hash needs --block-size (the engines') and --pythonhashseed (the engines' PYTHONHASHSEED)")
		}
		h, err := vllmhash.New(fl.vllmHash, fl.hashSeed)
		if err != nil {
			return usagef("--vllm-hash: %v", err)
		}
		hasher = h
	} else if fl.hashSeed != "" {
		return usagef("--pythonhashseed belongs to --vllm-hash")
	}
	if fl.httpAddr == "" {
		return usagef("--http is required, e.g. --http 127.0.0.1:8080")
	}
	if err := checkLocalAddr("--http", fl.httpAddr, "127.0.0.1:8080", "anyone who reaches it can read which engine caches which prompt", fl.httpRemote); err != nil {
		return err
	}
	if fl.replayTimeout <= 0 {
		return badFlag("--replay-timeout", fl.replayTimeout, "want a positive duration")
	}
	if fl.capacity < 0 {
		return badFlag("--capacity", fl.capacity, "want 0 (the default) or more")
	}
	if fl.blockSize < 0 || fl.blockSize > kvindex.MaxBlockSize {
		return badFlag("--block-size", fl.blockSize, fmt.Sprintf("want 0..%d", kvindex.MaxBlockSize))
	}
	if err := fl.live.check(); err != nil {
		return err
	}
	cc, err := fl.curve.config(e.logger)
	if err != nil {
		return err
	}
	srv := &kvIndexServer{model: fl.model, logger: e.logger}
	var be kvindex.Backend
	if fl.redisURL != "" {
		rc := redisstore.Config{URL: fl.redisURL, Prefix: fl.redisPrefix, Capacity: fl.capacity, LeaseTTL: fl.leaseTTL,
			Shards: fl.redisShards}
		if fl.redisLease || fl.share {
			rc.WriterID = redisstore.NewWriterID()
		}
		st, err := redisstore.New(rc)
		if err != nil {
			return err
		}
		defer st.Close()
		srv.store, be, srv.share = st, st, newKVShare(fl.share, st, fl.srcs.sources(), rc.WriterID, fl.leaseTTL, e.logger)
	}
	cfg := kvindex.Config{Backend: be, Capacity: fl.capacity, Seed: fl.seed, Model: fl.model,
		BlockSize: fl.blockSize, Logger: e.logger, SnapshotFile: fl.snapshot, SnapshotInterval: fl.snapInterval,
		OnBackendLost: srv.resyncAll}
	if hasher != nil {
		cfg.Keys = hasher.Keys
		srv.vllmKeys, srv.vxBlockSize = true, fl.blockSize
	}
	x, err := kvindex.New(cfg)
	if err != nil {
		return err
	}
	defer x.Close()
	srv.x = x
	sopts := fl.live.options()
	sopts.Guard.Curve = cc
	fl.allow.apply(&sopts.Guard) // a --bind source's accepted publishers
	kcfg := kvevents.Config{Handler: srv.share.wrap(srv.handle), Topic: fl.topic,
		FromStart: fl.fromStart, ReplayTimeout: fl.replayTimeout, Logger: e.logger, Socket: sopts, AnyPeer: fl.srcs.anyPeer}
	fl.srcs.applyFanIn(&kcfg)
	sub, err := kvevents.NewSubscriber(kcfg)
	if err != nil {
		return err
	}
	defer sub.Close()
	srv.sub = sub
	srcs := srv.share.initial(fl.srcs.sources()) // --share-ingest: none, followed as the leases say
	// With discovery the engines followed are not known yet: none of the
	// snapshot's is retired at start (discovery retires who leaves).
	srv.resume(srcs, fl.snapshot != "" || fl.redisURL != "", fl.redisURL == "" && !fl.disc.any())
	for _, s := range srcs {
		if err := sub.Add(s); err != nil {
			return err
		}
		var resume any
		if s.Resume != nil {
			resume = s.Resume.Seq
		}
		e.logger.Info("kv-index following", "source", s.Name, "endpoint", sub.Endpoint(s.Name), "bind", s.Bind, "replay", s.Replay,
			"fan_in", s.FanIn, "fan_in_replay", s.ReplayTemplate,
			"resume_after_seq", resume, "engine", cmp.Or(s.Engine, "vllm"))
	}
	srv.sources = srcs
	srv.resyncMu.Lock()
	srv.ready = true
	pending := srv.lostPending
	srv.resyncMu.Unlock()
	if pending {
		srv.resyncAll()
	}
	if len(fl.srcs.list) == 0 && !fl.disc.any() {
		e.logger.Info("kv-index is a read-only replica: no source, /score answers from the shared index")
	}
	h, err := srv.handler()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", fl.httpAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
	backend := "memory"
	if fl.redisURL != "" {
		backend = "redis"
	}
	ep := serveEndpointCapped(ln, hs, kvIndexMaxConns, "kv-index", "http_addr", "--http-allow-remote", 5*time.Second, e.logger,
		"url", "http://"+ln.Addr().String()+"/score", "backend", backend, "model", fl.model)
	defer ep.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waitShare := srv.share.start(rctx, sub, x)
	waitRetire := srv.startSnapRetire(rctx, fl.snapshot != "" && fl.disc.any(), kcfg.EngineTTL)
	waitDiscovery := followDiscovery(rctx, sub, fl.disc.discoverers(e.logger, fl.srcs.engine, x.Positions), e.logger, cancel)
	err = sub.Run(rctx)
	cancel()
	waitShare()
	waitRetire()
	if derr := waitDiscovery(); err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	ep.Close()
	out, err := json.Marshal(struct {
		Counters kvIndexCounters `json:"counters"`
	}{srv.counters()})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", out)
	return err
}
