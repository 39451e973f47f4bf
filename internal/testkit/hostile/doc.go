// Package hostile is zmqguard's built-in hostile corpus: the inputs that have
// crashed, wedged or silenced ZeroMQ receive loops (vLLM's and go-zeromq/zmq4's,
// see the project's docs/zmq4-findings.md and docs/protocol.md), as data, with a runner
// that replays them at a target and checks after each one that the target
// still answers.
//
// The corpus has three classes:
//
//   - transport: bytes that are not ZMTP 3 or break it — a connection held idle,
//     half a greeting, an HTTP request, a TLS ClientHello, 64 KiB of random
//     bytes, ZMTP 1.0 and 2.0 greetings, the PLAIN and CURVE mechanisms,
//     malformed READY commands, a PING, frame headers claiming 2^40 and 2^62
//     bytes after a valid handshake, a burst of 100 connect/close;
//   - envelope: well-formed ZMTP messages of the wrong shape, sent after a
//     handshake as a DEALER (or the type the target accepts): a message without
//     the empty delimiter, a 3-frame and a 70-frame message;
//   - payload: msgpack hazards sent as the body of a message in the form the
//     target expects (REQ to a ROUTER, PUSH to a PULL, XSUB to an XPUB):
//     invalid UTF-8 (a3e08080), a map keyed by a map (818001), 20,000-deep
//     nesting, an array claiming 2^32-1 elements (ddffffffff), a bare int (45),
//     an empty frame and a frame of 1 MiB + 1 byte.
//
// "Still answers" means that a fresh ZMTP 3 handshake with the target, as a
// socket type compatible with the one it announced in its READY, completes
// within a timeout (Alive). Probes that hold a stalled connection open check
// that while they hold it, since that is when a listener that handshakes in its
// accept loop is wedged.
//
// The scanner attacks the services it is pointed at. Point it only at loopback
// addresses or at hosts you run yourself.
package hostile
