package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"runtime"
	"strings"
	"time"
)

// debugHelp is the paragraph the help texts of coordinator and
// handshake-listener share about --debug-addr and the goroutines field.
const debugHelp = `With --debug-addr HOST:PORT (off by default; port 0 picks a free port) it
also serves HTTP on that address: Go's profiles under /debug/pprof/ (e.g.
go tool pprof http://HOST:PORT/debug/pprof/heap) and, at /debug/zmqguard, one
JSON object with the live goroutine count, heap figures from
runtime.ReadMemStats (heap_inuse, heap_sys, heap_idle, heap_released, sys in
bytes; num_gc) and the counters the exit line would print now. The address
is logged (debug_addr, also in the start line). HOST must be loopback
(127.0.0.1, ::1 or localhost) unless --debug-allow-remote is given: anyone
who can reach the port can read the process's memory profile.

The exit line's "goroutines" is runtime.NumGoroutine() taken after the
sockets and the debug endpoint were closed, just before the line is printed:
a clean shutdown leaves only a handful (the main goroutine and signal
handling); a larger number means something did not stop.`

// debugShutdownTimeout bounds how long the debug endpoint waits for requests
// in flight at exit before it closes their connections.
const debugShutdownTimeout = 2 * time.Second

// debugOptions are the --debug-addr and --debug-allow-remote flags.
type debugOptions struct {
	addr        string
	allowRemote bool
}

// addDebugFlags registers --debug-addr and --debug-allow-remote on fs.
func addDebugFlags(fs *flag.FlagSet) *debugOptions {
	o := &debugOptions{}
	fs.StringVar(&o.addr, "debug-addr", "",
		"serve /debug/pprof/ and /debug/zmqguard over HTTP on this `host:port` (default off; loopback only)")
	fs.BoolVar(&o.allowRemote, "debug-allow-remote", false,
		"allow a --debug-addr host that is not loopback (anyone reaching it can read heap profiles)")
	return o
}

// check validates the flags: a usage error unless --debug-addr is empty
// (off) or host:port with a loopback host (or any host with
// --debug-allow-remote). An empty host means every interface and is not
// loopback.
func (o *debugOptions) check() error {
	return checkLocalAddr("--debug-addr", o.addr, "127.0.0.1:6060", "the debug endpoint serves heap profiles to anyone who reaches it", o.allowRemote)
}

// checkLocalAddr validates an HTTP endpoint flag: empty (off), or host:port
// whose host is loopback unless allowRemote (the flag "--X-allow-remote").
// exposure says, as a whole clause, what a remote reader would get ("the
// debug endpoint serves heap profiles to anyone who reaches it"): it is
// written as given, nothing is appended to it.
func checkLocalAddr(flagName, addr, example, exposure string, allowRemote bool) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("%s %q: want host:port, e.g. %s (%v)", flagName, addr, example, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return usagef("%s %q: bad port", flagName, addr)
	}
	if allowRemote || isLoopbackHost(host) {
		return nil
	}
	return usagef("%s %q is not a loopback address: %s; use 127.0.0.1, ::1 or "+
		"localhost, or add %s", flagName, addr, exposure, strings.TrimSuffix(flagName, "-addr")+"-allow-remote")
}

// isLoopbackHost reports whether host (from host:port) is "localhost" or a
// loopback IP literal. Other names are not resolved: they are not loopback.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// debugServer is the HTTP endpoint --debug-addr starts.
type debugServer = httpEndpoint

// debugVars is what /debug/zmqguard serves. Goroutines comes first so that a
// shell script can take the first "goroutines" of the body.
type debugVars struct {
	Goroutines int           `json:"goroutines"`
	MemStats   debugMemStats `json:"memstats"`
	Command    string        `json:"command"`
	Counters   any           `json:"counters"`
}

// debugMemStats are the runtime.MemStats fields /debug/zmqguard serves, in
// bytes except NumGC.
type debugMemStats struct {
	HeapInuse    uint64 `json:"heap_inuse"`
	HeapSys      uint64 `json:"heap_sys"`
	HeapIdle     uint64 `json:"heap_idle"`
	HeapReleased uint64 `json:"heap_released"`
	Sys          uint64 `json:"sys"`
	NumGC        uint32 `json:"num_gc"`
}

// snapshotVars reads the process's figures now; counters is called for the
// command's live counters.
func snapshotVars(command string, counters func() any) debugVars {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	v := debugVars{
		Command: command,
		MemStats: debugMemStats{
			HeapInuse: ms.HeapInuse, HeapSys: ms.HeapSys, HeapIdle: ms.HeapIdle,
			HeapReleased: ms.HeapReleased, Sys: ms.Sys, NumGC: ms.NumGC,
		},
		Counters: counters(),
	}
	v.Goroutines = runtime.NumGoroutine()
	return v
}

// newDebugMux returns the debug endpoint's handlers on a mux of their own
// (never http.DefaultServeMux, on which importing net/http/pprof registers
// too).
func newDebugMux(command string, counters func() any) *http.ServeMux {
	mux := http.NewServeMux()
	// The index and every named profile (heap, goroutine, ...); seconds=
	// (CPU profile, trace, delta profiles) is bounded by maxProfileSeconds.
	mux.Handle("/debug/pprof/", boundProfiles(http.HandlerFunc(pprof.Index), maxProfileSeconds))
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.Handle("/debug/pprof/profile", boundProfiles(http.HandlerFunc(pprof.Profile), maxProfileSeconds))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.Handle("/debug/pprof/trace", boundProfiles(http.HandlerFunc(pprof.Trace), maxProfileSeconds))
	mux.HandleFunc("GET /debug/zmqguard", func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.Marshal(snapshotVars(command, counters))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(append(b, '\n'))
	})
	return mux
}

// startDebug listens on o.addr and serves the debug endpoint in the
// background; it returns nil, nil when --debug-addr is off. counters returns
// the command's live counters (it is called from HTTP handlers, concurrently
// with the command). Close stops it.
func startDebug(o *debugOptions, command string, counters func() any, logger *slog.Logger) (*debugServer, error) {
	if o.addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-addr: %w", err)
	}
	addr := ln.Addr().String()
	// WriteTimeout above the longest profile: an accepted one is written.
	srv := &http.Server{Handler: newDebugMux(command, counters), WriteTimeout: (maxProfileSeconds + 15) * time.Second}
	return serveEndpoint(ln, srv, "debug", "debug_addr",
		"--debug-allow-remote", debugShutdownTimeout, logger,
		"url", "http://"+addr+"/debug/zmqguard", "pprof", "http://"+addr+"/debug/pprof/"), nil
}

// hostOf returns the host of a host:port address.
func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}
