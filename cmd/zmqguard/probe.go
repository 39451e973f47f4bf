package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/vllm"
)

var probeSpec = commandSpec{
	name:     "probe",
	synopsis: "ADDR [--pp 0] [--tp 0] [--variant v3|v2|v1] [--vllm-version latest] [--timeout 5s] [--json] [--curve-server-key Z85 [--curve-secret-key-file F]]",
	args:     true,
	summary:  "triage a NIXL handshake listener step by step",
	help: `Makes one NIXL handshake with the listener at ADDR, as a vLLM decode worker
would, one step at a time (connect, ZMTP handshake, request, reply, payload),
and prints one line per step on stdout, naming the step that failed and its
likely causes. Exits 0 only when the metadata was received and decoded.

Use it when decode workers log handshake timeouts: it tells a closed port
from a listener that is not ZMTP, a dead receive loop, a rank not served or
a payload from another release. --vllm-version names the release the
listener runs; it selects the default --variant (v3 for every supported
release: the request with the pipeline-parallel rank and the reply with the
clock-sync timestamp frame, NIXL connector version 5 and later).

A listener that serves CURVE only (handshake-listener --curve-secret-key-file)
is probed with --curve-server-key, its public key in Z85, and
--curve-secret-key-file, a client certificate it admits (--curve-allow). With
--curve-server-key alone the probe makes a fresh key pair, which only a
server admitting any key (libzmq's curve_server without ZAP) lets in.`,
}

// releaseVariant is the request form of release r: V3 for every supported
// profile (NIXL connector version 5 and later pair the V3 request with the
// clock-sync timestamp reply).
func releaseVariant(r vllm.Release) string {
	if r.Rules().NixlConnectorVersion >= 5 {
		return "v3"
	}
	return "v2"
}

// parseVariant parses --variant.
func parseVariant(s string) (handshake.Variant, bool) {
	switch strings.ToLower(strings.TrimPrefix(strings.ToLower(s), "v")) {
	case "1":
		return handshake.V1, true
	case "2":
		return handshake.V2, true
	case "3":
		return handshake.V3, true
	}
	return 0, false
}

// probeFlags are the flags of probe.
type probeFlags struct {
	pp      int
	tp      int
	variant string
	release *vllm.Release
	timeout time.Duration
	asJSON  bool
	curve   *curveClientFlags
}

// probeCmd is the probe command.
var probeCmd = command[probeFlags]{
	spec: probeSpec,
	register: func(fs *flag.FlagSet, fl *probeFlags) {
		fs.IntVar(&fl.pp, "pp", 0, "pipeline-parallel rank to ask for (v3 only)")
		fs.IntVar(&fl.tp, "tp", 0, "tensor-parallel rank to ask for (v3 and v2)")
		fs.StringVar(&fl.variant, "variant", "", "request form: v3 (current vLLM), v2 (since 0.13) or v1 (0.9-0.10) (default: the --vllm-version release's, v3)")
		fl.release = releaseFlag(fs)
		fs.DurationVar(&fl.timeout, "timeout", 5*time.Second, "bound on each network step")
		fs.BoolVar(&fl.asJSON, "json", false, "print the report as one JSON object instead of one line per step")
		fl.curve = addCurveClientFlags(fs)
	},
	run: runProbe,
}

// checkDialEndpoint refuses, in one line naming the value, an endpoint a
// client cannot dial: the forms are tcp://host:port (port 1..65535, a host
// to connect to), ipc://path, and a bare host:port taken as tcp. It checks
// the form only: whether the host resolves is the dial's business.
func checkDialEndpoint(ep string) error {
	bad := func(detail string) error {
		if len(ep) > 128 {
			ep = ep[:128] + "..."
		}
		return usagef("bad endpoint %q: %s", ep, detail)
	}
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok {
		scheme, rest = "tcp", ep
	}
	switch scheme {
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return bad("want tcp://host:port")
		}
		if host == "" || host == "*" {
			return bad("has no host to connect to")
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strings.Trim(port, "0123456789") != "" {
			return bad("port is not a number in 1..65535")
		}
		return nil
	case "ipc":
		if rest == "" {
			return bad("has an empty path")
		}
		return nil
	}
	return bad("want tcp://host:port or ipc://path")
}

// runProbe is the run function of probe: it checks the flags and
// the arguments (e.args), then does the work.
func runProbe(ctx context.Context, fl *probeFlags, e *env) error {
	if len(e.args) != 1 {
		return usagef("want exactly one ADDR, got %d arguments", len(e.args))
	}
	if err := checkDialEndpoint(e.args[0]); err != nil {
		return err
	}
	if fl.variant == "" {
		fl.variant = releaseVariant(*fl.release)
	}
	v, ok := parseVariant(fl.variant)
	if !ok {
		return usagef("--variant %q: want v3, v2 or v1", fl.variant)
	}
	if fl.pp < 0 || fl.pp > nixlwire.MaxRank {
		return badFlag("--pp", fl.pp, fmt.Sprintf("want 0..%d", nixlwire.MaxRank))
	}
	if fl.tp < 0 || fl.tp > nixlwire.MaxRank {
		return badFlag("--tp", fl.tp, fmt.Sprintf("want 0..%d", nixlwire.MaxRank))
	}
	if v == handshake.V2 && fl.pp != 0 {
		return badFlag("--pp", fl.pp, "a v2 request names no pipeline-parallel rank: want 0")
	}
	if v == handshake.V1 && fl.pp != 0 {
		return badFlag("--pp", fl.pp, "a v1 request names no rank: want 0")
	}
	if v == handshake.V1 && fl.tp != 0 {
		return badFlag("--tp", fl.tp, "a v1 request names no rank: want 0")
	}
	if fl.timeout <= 0 {
		return badFlag("--timeout", fl.timeout, "want a positive duration")
	}
	cc, err := fl.curve.config(e.logger)
	if err != nil {
		return err
	}
	req := handshake.Request{Variant: v, PP: fl.pp, TP: fl.tp}
	e.logger.Debug("probe", "endpoint", e.args[0], "variant", v, "vllm_version", fl.release.String())
	opts := handshake.ProbeOptions{Timeout: fl.timeout, Out: e.stdout, Curve: cc}
	if fl.asJSON {
		opts.Out = nil
		return probeJSON(ctx, e, e.args[0], req, opts)
	}
	_, err = handshake.Probe(ctx, e.args[0], req, opts)
	if err != nil {
		e.logger.Debug("probe failed", "endpoint", e.args[0], "err", err)
	}
	return err
}
