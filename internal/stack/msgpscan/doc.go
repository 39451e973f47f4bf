// Package msgpscan is the structural msgpack pre-scan every zmqguard decode
// goes through, and the guarded decodes built on it.
//
//	if err := msgpscan.Scan(frame, &decodeguard.Limits{MaxDepth: 4}); err != nil {
//		return err // a classified *decodeguard.Error: drop and count it
//	}
//
// [Scan] refuses hostile frames (too deep, lengths longer than the bytes
// present, too many objects, invalid UTF-8, composite map keys, unexpected
// ext types, truncation, trailing bytes) in one iterative pass before any
// decoder allocates what a header claims. [DecodeMsgp] and [DecodeUntyped]
// run Scan and then a msgp decode, turn every decoder error into a
// classified decodeguard.ReasonDecode error and recover a decoder's panic
// into a decodeguard.ReasonDecoderPanic one carrying a [PanicError].
//
// Scan allocates nothing when it accepts a frame (with the default
// MaxDepth), and [ScanOffset] allocates nothing at all, so a flood of bad
// frames costs no garbage. Everything here is safe for concurrent use.
//
// Defaults (what a nil or zero decodeguard.Limits means, see
// [DefaultLimits]): depth 32, 262,144 objects, 1 MiB, scalar map keys only,
// no ext types.
package msgpscan
