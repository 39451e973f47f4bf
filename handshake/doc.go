// Package handshake speaks the NIXL side channel of vLLM's KV-transfer
// connector: the metadata handshake a decode worker makes with a prefill
// engine before it pulls KV cache from it.
//
//	hash, _ := handshake.Factors{Model: "m", Dtype: "torch.bfloat16", VLLMVersion: "0.11.1"}.Hash()
//	payload, _ := handshake.EncodePayload(hash, &handshake.NixlAgentMetadata{EngineID: "prefill-0"}, vllm.Latest())
//	l, err := handshake.NewListener(handshake.ListenerConfig{
//		Endpoint: "tcp://0.0.0.0:5600",
//		Payloads: map[handshake.Rank][]byte{{PP: 0, TP: 0}: payload},
//	})
//	if err != nil {
//		return err
//	}
//	defer l.Close()
//	go l.Serve(ctx) // the prefill side; and a decode worker's fetch:
//	r, err := handshake.Fetch(ctx, "tcp://prefill:5600", handshake.Request{}, handshake.ClientOptions{ExpectedHash: hash})
//	if errors.Is(err, handshake.ErrHashMismatch) { /* another vLLM build, model or dtype */ }
//
// # Runtime
//
// Everything runs on zmqguard's hardened sockets and receive loop:
//
//   - [Listener] ([NewListener], [Listener.Serve]): the prefill side. A
//     ROUTER serving caller-supplied payloads ([EncodePayload]) per
//     (pp_rank, tp_rank) to V1, V2 and V3 requests; every bad request (bare
//     DEALER, wrong frame count, undecodable, wrong arity or types, another
//     message, a rank not served) is dropped with its reason and counted,
//     and the listener goes on serving. Optionally an unknown rank gets an
//     explicit error reply that makes a vLLM client fail at once
//     ([ListenerConfig.ErrorReplies]). A push-mode block registration is
//     refused with the reply vLLM's decode side parses.
//   - [Fetch]: the decode side, as vLLM does it (a fresh REQ per
//     handshake, a 5 s timeout). Every failure matches one sentinel under
//     errors.Is: [ErrTimeout] (whose text names the `zmqguard probe` line
//     to run), [ErrRefused], [ErrBadReplyShape], [ErrUndecodablePayload],
//     [ErrHashMismatch], [ErrEngineIDMismatch], [ErrRejected].
//   - [Probe]: the library behind `zmqguard probe`: TCP connect, ZMTP
//     handshake, request, reply, payload, each step timed and reported, so
//     an operator sees which cause a handshake timeout had.
//
// # Wire
//
// A request is the raw bytes "get_meta_msg" (V1), or msgpack
// (GET_META_MSG, tp_rank) (V2) or (GET_META_MSG, pp_rank, tp_rank) (V3);
// the reply is the agent metadata (V1), or a payload map of the sender's
// compatibility hash and its msgpack-encoded [NixlAgentMetadata] (V2),
// followed for V3 by a float64 timestamp frame of the sender's clock. The
// encodings match Python's msgpack and msgspec byte for byte. The
// compatibility hash ([Factors.Hash]) is the hex SHA-256 of Python's
// json.dumps(factors, sort_keys=True) over the factor set of the vLLM
// release named by [Factors].Release (package vllm).
//
// Every parser treats its input as hostile: bad input yields a classified
// error (see decodeguard.ReasonOf) and never a panic, lengths read from the
// wire are checked against the bytes present before anything is allocated,
// and error texts carry peer bytes only as a length and a hex prefix, or,
// for a peer-sent string such as an engine id, quoted when it is short
// printable ASCII.
//
// # Configuration
//
// The zero value of every field of [ListenerConfig], [ClientOptions] and
// [ProbeOptions] means the default its doc states; a negative timeout is
// an error that names the field and the value.
//
// The wire formats are described in the repository's docs/protocol.md; the
// facts were read from vLLM's sources. docs/vllm-releases.md has the
// factor sets and connector versions by release.
package handshake
