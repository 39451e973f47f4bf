// Package proof is zmqguard's hostile-network proof at the level of whole
// processes. It has no API: its tests build the zmqguard command, start
// `zmqguard coordinator` and `zmqguard handshake-listener` as processes bound
// to 127.0.0.1, attack them from outside, and check what an operator would
// check:
//
//   - TestNmapVersionScan: `nmap -sV --version-all` at every port (skipped,
//     loudly, only when nmap is not installed; under CI=true it fails
//     instead);
//   - TestScanCommand: `zmqguard scan` at every port, every probe of the
//     built-in hostile corpus;
//   - TestSeedReplay: a libzmq peer set (testdata/seeds_replay.py, pyzmq)
//     replays the eight scenarios of the seeds — stray bare DEALER, malformed
//     handshake content, unknown rank, undecodable engine frame, int frame,
//     invalid UTF-8 and a map keyed by a map on the front socket, deep
//     nesting on the front socket, a stray subscription during start-up —
//     and every one must pass;
//   - TestCountersAccount: the counters each process prints as one JSON line
//     at SIGTERM account for every frame the replay sent: each junk frame
//     dropped once under its expected reason, each valid message accepted,
//     no reply dropped at the listener's per-peer queue bound (dropped_hwm).
//
// Every counters line is decoded strictly (an unknown field fails the test)
// and must report the goroutines left after shutdown (at most a handful: a
// larger count is a goroutine that outlived the sockets) and, when the socket
// layer reports accept errors, none.
//
// After every attack the same after-checks run: both processes are still
// running, a NIXL handshake (handshake.Fetch) succeeds, an engine that
// subscribes again receives READY (dppeer.DialEngine, WaitReady), and
// the stats an engine sends reach a front-end (dppeer.DialFrontEnd,
// NextStats).
//
// When the tests run with -race, the command is built with -race too, and a
// race report in a process's stderr fails the test.
//
// The soak, fault and fuzzing campaigns that run outside CI live in the
// repository's reliability/ directory and are reported in RELIABILITY.md.
package proof
