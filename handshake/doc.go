// Package handshake speaks the NIXL side channel of vLLM's KV-transfer
// connector: the metadata handshake a decode worker makes with a prefill
// engine before it pulls KV cache from it.
//
// The runtime, on zmqguard's hardened sockets and SafeLoop:
//
//   - [Listener] ([NewListener], [Listener.Serve]): the prefill side. A
//     ROUTER serving caller-supplied payloads per (pp_rank, tp_rank) to
//     V1, V2 and V3 requests; every bad request (bare DEALER, wrong frame
//     count, undecodable, wrong arity or types, another message, a rank not
//     served) is dropped with its reason and counted, and the listener goes
//     on serving. Optionally an unknown rank gets an explicit error reply
//     that makes a vLLM client fail at once ([ListenerConfig.ErrorReplies]).
//   - [Fetch]: the decode side, as vLLM does it (a fresh REQ per
//     handshake, a 5 s timeout) with typed errors: [ErrTimeout] (whose
//     [TimeoutError] points to the probe), [ErrRefused], [ErrBadReplyShape],
//     [ErrUndecodablePayload], [ErrHashMismatch], [ErrEngineIDMismatch],
//     [ErrRejected].
//   - [Probe]: the library behind `zmqguard probe`: TCP connect, ZMTP
//     handshake, request, reply, payload, each step timed and reported, so
//     an operator sees which cause a handshake timeout had.
//
// The wire layer: pure functions over bytes, no sockets.
//
//   - [ParseRequest] and [AppendRequest]: the request a decode worker's REQ
//     socket sends, in the three forms vLLM has used (raw `get_meta_msg`;
//     msgpack (GET_META_MSG, tp_rank); msgpack (GET_META_MSG, pp_rank,
//     tp_rank)).
//   - [NixlHandshakePayload] and [NixlAgentMetadata]: msgp-generated codecs
//     whose encodings match Python's msgpack and msgspec byte for byte, with
//     [DecodePayload] and [DecodeAgentMetadata], which run decodeguard's
//     structural pre-scan first and turn every failure into a classified
//     [decodeguard.Error].
//   - [AppendTimestamp] and [ParseTimestamp]: the reply's clock-sync frame
//     (a msgpack float64 of the sender's perf-counter seconds).
//   - [CompatibilityHash] and [Factors]: vLLM's NIXL compatibility hash, the
//     hex SHA-256 of Python's json.dumps(factors, sort_keys=True).
//
// Every parser here treats its input as hostile: bad input yields a
// classified error (see [decodeguard.ReasonOf]) and never a panic, lengths
// read from the wire are checked against the bytes present before anything
// is allocated, and error texts carry peer bytes only as a length and a hex
// prefix, or, for a peer-sent string such as an engine id, quoted when it
// is short printable ASCII (see [SafeText]).
//
// The wire formats are described in the project's docs/protocol.md; the facts
// were read from vLLM's sources. The compatibility hash's factor set and
// connector version follow the vLLM release named by [Factors].Release
// (package vllm; docs/vllm-releases.md in the repository).
package handshake
