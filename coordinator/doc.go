// Package coordinator is a vLLM-compatible data-parallel (DP) coordinator
// that no engine, front-end or stranger on its ports can crash or wedge.
//
//	c, err := coordinator.New(coordinator.Config{
//		Front:       "tcp://0.0.0.0:5570", // API front-ends
//		BackOutput:  "tcp://0.0.0.0:5571", // engines push their outputs here
//		BackPublish: "tcp://0.0.0.0:5572", // READY and START_DP_WAVE to engines
//		Engines:     4,
//	})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	err = c.Run(ctx) // until ctx ends; c.Stats() at any time
//
// The coordinator sits between vLLM's DP engine cores and its API
// front-ends: it collects each engine's queue lengths, publishes them for
// load balancing, and keeps the engines' global "request wave" in step
// (the project's docs/protocol.md §2 describes the wire).
//
// # Runtime
//
// [New] binds three sockets with zmqguard's hardened socket package: the
// front publish XPUB (API front-ends subscribe, receive stats, send
// wake-ups and elastic-EP scale notices), the back output PULL (engines
// push EngineCoreOutputs) and the back publish XPUB (engines subscribe,
// receive READY and START_DP_WAVE). [Coordinator.Run] puts a SafeLoop
// (package loop) on each socket and selects over their deliveries and a
// publication timer in one goroutine that owns the state machine:
//
//	front XPUB   loop: front-end message parser    --+
//	back PULL    loop: enginecore.DecodeHeader     --+--> state --> sends
//	back XPUB    loop: subscription check          --+
//	timer        StatsInterval / IdleInterval      --+
//
// Start-up waits for one "\x01" per engine on the back publish socket and
// then sends READY; anything else arriving meanwhile (a subscription to a
// topic such as "\x01probe", junk) is dropped with a counted, rate-limited
// warning and start-up goes on. It waits as long as it takes, logging every
// 10 s how many engines are missing, unless Config.StartupDeadline is set.
//
// Everything a peer can get wrong is a drop with a reason, counted once:
// by the socket layer (refused connections: raw TCP probes, bad handshakes,
// oversize messages; Stats.Refused), by a loop (frame count, decode,
// validation) or by the state machine (an engine index it does not have).
// [Coordinator.Stats] adds them up; nothing a peer sends ends Run.
//
// # State machine
//
// The coordinator's state machine (internal to the package) is
// single-threaded and pure: each input (an engine output, a front-end
// message, a back-publish subscription, a clock tick) goes in and the
// actions to take come out. It follows vLLM's coordinator
// (vllm/v1/engine/coordinator.py) transition for transition, except where
// vLLM could be killed or misled by one bad message (see "No single message
// wedges it" below; [Stats] counts each case).
//
// # vLLM releases
//
// Config.Release names the vLLM release the engines and front-ends run, as
// a [vllm.Release]; the zero value is vllm.Latest, current vLLM main. Its
// rules select three behaviours:
//
//   - the stats layout: [waiting, running, kv_cache_usage] per engine since
//     vLLM PR #49204, [waiting, running] before (a front-end fails to unpack
//     the other layout, so every request it routes fails);
//   - the wake rule: before vLLM PR #51481 a front-end wake while paused sets
//     running and publishes; since, it only broadcasts START_DP_WAVE and DP
//     rank 0's start_wave sets running;
//   - the scale-up rule: older coordinators mark the engines paused when
//     SCALE_ELASTIC_EP grows the engine list; the newest does not;
//   - with the option ",pr54762" (vLLM PR #54762, open), START_DP_WAVE for
//     wave 0 right after the start-up READY, so headless engine ranks
//     step before the first request.
//
// The oldest profile, vllm.Releases()[0], keeps every old behaviour; the
// project's docs/vllm-releases.md lists the profiles and their evidence.
//
// # No single message wedges it
//
// Beyond dropping malformed input, the state machine bounds what a
// well-formed message can do: a stats message with an implausible
// (current_wave, step_counter) hides at most 2 real ones (the third stale
// message in a row restarts that engine's ordering); a wave notice may not
// move the wave more than 4 past the current one (unless 3 in a row
// agree), and the wave never reaches the range guard; SCALE_ELASTIC_EP is
// bounded by Config.MaxEngines (by default 4 times the starting engines)
// and optionally restricted to Config.ScaleFrom. Control messages keep
// their path: READY is sent at most once per Config.ReadyInterval (a newly
// subscribed engine still gets it within the interval), an identical
// START_DP_WAVE is not repeated within it, and a control copy the back
// publish socket drops for a full queue is counted (Stats.ControlDropped)
// and logged at error level.
//
// # Engines that go silent
//
// The sockets' heartbeats (socket.Options, on by default) disconnect a
// peer silent past the heartbeat timeout. On the back sockets the
// coordinator then logs "coordinator: engine went silent" at warn level
// with the engine's index, and counts it per engine in
// Stats.SilentEngines: on the back output socket the index is the
// engine_index of the outputs that connection carried; on the back publish
// socket (a subscription carries no index) it is the engine whose outputs
// come from the same host, and "ambiguous" (listing the candidates) when
// several engines share that host.
//
// # Bad input
//
// Every parser treats its input as hostile: bad input yields a classified
// *[decodeguard.Error] (see [decodeguard.ReasonOf]) and never a panic,
// lengths read from the wire are checked against the bytes present before
// anything is allocated, and no error text carries raw peer bytes.
// Decoding a valid engine output and parsing a valid front-end message
// allocate nothing.
package coordinator
