// Command zmqguard runs zmqguard's references and tools without writing Go:
// a demo of the references under attack, the DP coordinator, a NIXL handshake
// listener, the handshake probe, the hostile scanner, a measuring sink, an
// engine output receiver, KV-event tools and CURVE key generation.
//
// Usage:
//
//	zmqguard [global flags] COMMAND [flags] [ARGS]
//
// Commands (the same list as 'zmqguard help', from the one command table;
// TestPackageDocListsEveryCommand keeps them equal, and
// `go test ./cmd/zmqguard -run TestPackageDocListsEveryCommand -update-doc`
// rewrites this list from the table):
//
//	demo                the product tour: the references on loopback under attack, counters at the end
//	coordinator         run a vLLM-compatible DP coordinator until SIGINT/SIGTERM
//	handshake-listener  serve demo NIXL handshake metadata until SIGINT/SIGTERM
//	probe ADDR          triage a NIXL handshake listener step by step
//	scan ADDR...        replay the built-in hostile corpus at your own services
//	sink                a guarded PULL that counts valid messages, for measuring a machine
//	version             print the module version and VCS revision (also --version); --profiles: the vLLM release table
//	keygen              make a CURVE key pair (Z85) or a pair of ZPL certificate files
//	outputs             a front-end's guarded output socket: engines' EngineCoreOutputs as JSON lines
//	kv-events           follow vLLM KV-cache event publishers, one JSON line per event
//	kv-publish          publish synthetic vLLM or SGLang KV-event batches (demos and load)
//	kv-index            a KV-cache index of vLLM engines, scored over HTTP (POST /score)
//
// ADDR is a ZeroMQ endpoint such as tcp://127.0.0.1:5600. Flags use Go's
// style (-flag or --flag, -flag=value or -flag value) and may stand before or
// after the arguments; "--" ends the flags. Every command answers -h with its
// own flags. The global flags --log-format (auto, text, json, tint) and
// --log-level (debug, info, warn, error) are accepted by every command.
//
// Logs go to stderr. stdout carries only results: the counters as one JSON
// line (coordinator, handshake-listener, sink), the probe's report, the scan's
// table, the demo's final table.
//
// Exit codes: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr))
	stop()
	os.Exit(code)
}

// commands is the command table, in the order 'zmqguard help' lists them.
var commands = []runner{
	demoCmd,
	coordinatorCmd,
	listenerCmd,
	probeCmd,
	scanCmd,
	sinkCmd,
	versionCmd,
	keygenCmd,
	outputsCmd,
	kvEventsCmd,
	kvPublishCmd,
	kvIndexCmd,
}

// run is the whole program: it parses the global flags and the command name
// and dispatches. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, term bool) int {
	e := newEnv(stdout, stderr, term)
	fs := flag.NewFlagSet("zmqguard", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.registerGlobal(fs)
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			writeMainUsage(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "zmqguard: %v (see 'zmqguard -h')\n", err)
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	rest := fs.Args()
	if len(rest) == 0 {
		writeMainUsage(stderr, fs)
		return 2
	}
	name := rest[0]
	if name == "help" {
		if len(rest) > 1 {
			return run(ctx, []string{rest[1], "-h"}, stdout, stderr, term)
		}
		writeMainUsage(stdout, fs)
		return 0
	}
	for _, c := range commands {
		if c.commandSpec().name == name {
			return c.main(ctx, e, rest[1:])
		}
	}
	fmt.Fprintf(stderr, "zmqguard: unknown command %q (see 'zmqguard -h')\n", name)
	return 2
}

// commandLines is the command list of 'zmqguard help' and of the package
// documentation, one line per entry of the commands table: the name, with
// the arguments its synopsis starts with (probe ADDR), and the summary.
func commandLines() []string {
	out := make([]string, 0, len(commands))
	for _, c := range commands {
		spec := c.commandSpec()
		name := spec.name
		for _, w := range strings.Fields(spec.synopsis) {
			if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") {
				break
			}
			name += " " + w
		}
		out = append(out, fmt.Sprintf("%-19s %s", name, spec.summary))
	}
	return out
}

func writeMainUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: zmqguard [global flags] COMMAND [flags] [ARGS]")
	fmt.Fprintln(w, "\nZeroMQ receive loops that no peer can kill: references and tools.")
	fmt.Fprintln(w, "\nCommands:")
	for _, l := range commandLines() {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintln(w, "\nADDR is a ZeroMQ endpoint such as tcp://127.0.0.1:5600.")
	fmt.Fprintln(w, "Run 'zmqguard COMMAND -h' for a command's flags. Global flags (accepted by every command):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nExit codes: 0 success, 1 failure, 2 usage error.")
}
