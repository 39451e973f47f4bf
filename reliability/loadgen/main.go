// Command loadgen drives zmqguard's reference processes for the soak and
// fault scripts in reliability/ (see RELIABILITY.md). It is a test tool, not
// part of the library; every mode talks only to the endpoints it is given,
// which should be processes you run (normally on 127.0.0.1).
//
// Usage:
//
//	loadgen soak     --listener EP --front EP --back-output EP --back-publish EP [--duration 10m]
//	loadgen engine   --back-publish EP --back-output EP [--index 0] [--complete-after 300ms]
//	loadgen frontend --front EP [--wake-every 1s]
//	loadgen fetch    --listener EP [--duration 30s] [--interval 20ms] [--timeout 1s]
//	loadgen idle     --target EP [--conns 1000] [--mode tcp|zmtp] [--hold 20s] [--source IP]
//	loadgen stall    --listener EP [--requests 200000] [--hold 20s]
//
// soak sends mixed valid traffic (handshakes, engine stats, wave notices,
// front-end wake-ups) and junk (bad requests, undecodable frames, payload
// hazards, raw TCP garbage, the built-in hostile corpus) at full rate to a
// coordinator started with --engines 1 and a handshake listener, for the
// duration. engine and frontend play one DP engine and one API front-end and
// log what they see. fetch performs handshakes in a loop and prints each
// second how many succeeded and how many failed, by error kind. idle opens
// many connections and holds them without a word (tcp) or after a completed
// ZMTP handshake (zmtp). stall is a peer that sends requests and never reads
// a reply.
//
// Progress goes to stderr, one line per second; a final JSON summary goes to
// stdout. SIGINT or SIGTERM ends any mode early (with its summary).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen soak|engine|frontend|fetch|idle|stall [flags] (see the package doc)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	modes := map[string]func(context.Context, []string) (any, error){
		"soak": runSoak, "engine": runEngine, "frontend": runFrontend,
		"fetch": runFetch, "idle": runIdle, "stall": runStall,
	}
	mode, ok := modes[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "loadgen: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
	summary, err := mode(ctx, os.Args[2:])
	if summary != nil {
		b, _ := json.Marshal(summary)
		fmt.Println(string(b))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// quiet returns socket options that log nothing.
func quiet() socket.Options {
	o := socket.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

// progress prints fn's line to stderr every second until ctx ends.
func progress(ctx context.Context, fn func(elapsed time.Duration) string) {
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fmt.Fprintf(os.Stderr, "%s t=%ds %s\n", time.Now().Format("15:04:05"), int(time.Since(start).Seconds()), fn(time.Since(start)))
		}
	}
}

// kinds counts events by name, concurrently.
type kinds struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (k *kinds) add(name string) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]uint64{}
	}
	k.m[name]++
	k.mu.Unlock()
}

func (k *kinds) snapshot() map[string]uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]uint64, len(k.m))
	for n, v := range k.m {
		out[n] = v
	}
	return out
}

func (k *kinds) String() string {
	s := k.snapshot()
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, s[n])
	}
	return strings.Join(parts, " ")
}

// fetchKind names the kind of a failed handshake.
func fetchKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{handshake.ErrTimeout, "timeout"}, {handshake.ErrRefused, "refused"},
		{handshake.ErrBadReplyShape, "bad-reply-shape"}, {handshake.ErrUndecodablePayload, "undecodable-payload"},
		{handshake.ErrHashMismatch, "hash-mismatch"}, {handshake.ErrEngineIDMismatch, "engine-id-mismatch"},
		{handshake.ErrRejected, "rejected"}, {context.Canceled, "cancelled"}, {context.DeadlineExceeded, "cancelled"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "untyped"
}

// fetchLoop performs handshakes with listener, one every interval (as fast
// as they complete when interval is 0), until ctx ends.
func fetchLoop(ctx context.Context, listener string, interval, timeout time.Duration, ok *atomic.Uint64, failed *kinds) {
	opts := handshake.ClientOptions{Timeout: timeout, SkipHashCheck: true, Socket: quiet()} // load only: any listener
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for ctx.Err() == nil {
		_, err := handshake.Fetch(ctx, listener, handshake.Request{Variant: handshake.V3}, opts)
		switch {
		case err == nil:
			ok.Add(1)
		case ctx.Err() != nil:
			return
		default:
			failed.add(fetchKind(err))
		}
		if tick != nil {
			select {
			case <-ctx.Done():
				return
			case <-tick:
			}
		}
	}
}

// ---- soak -----------------------------------------------------------------
