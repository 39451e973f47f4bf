// Package decodeguard is the payload guard every zmqguard decode goes through.
//
// It holds what the whole project shares about bad input:
//
//   - the closed set of drop reasons ([Reason]) that every layer uses to say why
//     a peer's input was refused;
//   - the classified bad-input error ([Error]) and [IsBadInput], which tells such
//     an error apart from a genuine bug;
//   - [Scan], a structural msgpack pre-scan that refuses hostile frames (too
//     deep, lengths longer than the bytes present, too many objects, invalid
//     UTF-8, composite map keys, unexpected ext types, truncation, trailing
//     bytes) in one iterative pass before any decoder allocates what a header
//     claims;
//   - [DecodeMsgp] and [DecodeUntyped], which run Scan and then a msgp decode,
//     turn every decoder error into a classified [ReasonDecode] error and
//     recover a decoder's panic into a [ReasonDecoderPanic] one;
//   - [Render] and [Hex], which turn raw peer bytes into something safe to log
//     (length and a capped hex prefix, never the bytes themselves).
//
// The package imports nothing of the project. Scan allocates nothing when it
// accepts a frame (with the default MaxDepth), and [ScanOffset] allocates
// nothing at all, so a flood of bad frames costs no garbage. Everything here
// is safe for concurrent use.
//
// Defaults ([DefaultLimits], also what a nil or zero [Limits] means): depth
// 32, 262,144 objects, 1 MiB, scalar map keys only, no ext types.
package decodeguard
