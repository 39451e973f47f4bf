// Package enginecore decodes and encodes vLLM's EngineCoreOutputs, the
// message an engine core pushes to its API front-ends and to the
// data-parallel coordinator, refusing any bad input before it allocates.
//
//	var m enginecore.Message // reuse it: later decodes allocate nothing
//	if err := enginecore.Decode(frames, &m, nil); err != nil {
//		return err // a classified *decodeguard.Error, never a panic
//	}
//	for i := range m.Outputs {
//		o := &m.Outputs[i]
//		fmt.Println(string(o.RequestID), o.NewTokenIDs)
//		if lp := &o.NewLogprobs; lp.Present {
//			fmt.Println(lp.TokenIDs.Shape, lp.TokenIDs.Int(0))
//		}
//	}
//
// Its types cover every part of the message (EngineCoreOutput, logprobs,
// events, the utility output, scheduler stats) and the arrays and tensors
// inside them.
//
// # Two views of one message
//
// [Header] is the coordinator's view: every top-level field of
// EngineCoreOutputs except the contents of the request outputs and of the
// utility output, which are checked for shape and skipped. Decoding into a
// reused Header allocates nothing; it is what package coordinator uses.
//
// [Message] is the full view a front-end, router or output tap needs: the
// Header plus every [Output], the [UtilityOutput] and the finished request
// ids, with arrays as zero-copy [Array] views into the frames. [Decode] fills
// it from a multipart message (frame 0 the msgpack body, frames 1..N the
// raw buffers that arrays reference by index); [Encoder] writes vLLM's exact
// bytes back.
//
// # Wire
//
// EngineCoreOutputs and EngineCoreOutput are msgspec structs with
// array_like: arrays in field order with every field, defaults included
// (msgspec ignores omit_defaults for array-like structs), so vLLM sends
// EngineCoreOutputs as 8 elements and EngineCoreOutput as 14 (vLLM main of
// 2026-08-07); UtilityOutput is always 3 elements, the NamedTuples 4, and
// the dataclasses (SchedulerStats, PrefillStats) maps of every field. The
// [Encoder] writes exactly that; its tests compare it byte for byte with
// bytes written by vLLM's own code. The decoder accepts any length (missing
// fields take their defaults, fields after the ones it knows are skipped),
// so every release's shape decodes. docs/engine-outputs.md has the field
// list with the vLLM pull request each field comes from.
//
// A utility output's call_id is the uint64 id of the call it answers
// ([UtilityOutput.CallID]), or a negative id for a message the engine sends
// unasked ([UtilityOutput.Special]): -1 an elastic-EP notification, -2 a
// fault-tolerance status, typed by [UtilityOutput.SpecialValue].
//
// An array or tensor is [dtype, shape, data]: dtype is numpy's dtype.str
// ("<i4", "<f4", "<i8"...) or torch's dtype name ("float32", "bfloat16",
// "int64"...), shape a list of ints, and data either msgpack ext type 3
// holding the raw little-endian bytes inline, or an int naming the aux
// frame that holds them (vLLM moves buffers of 256 bytes or more out of
// line). Ext types 1 and 2 (pickle) are refused.
//
// # Checks before any allocation or view
//
// [Decode] refuses, with a classified *decodeguard.Error, before it
// allocates or builds a view: more frames than Limits.MaxFrames; a body over
// MaxBytes; anything the structural pre-scan would refuse (it makes its checks
// in the decoding pass: UTF-8 of every str, container lengths against the
// bytes left, one element budget, depth; uninterpreted sub-objects go
// through the pre-scan itself, with ext type 3 the only extension allowed); an
// unknown or big-endian dtype; more than [maxDims] dimensions; a negative
// dimension; a shape whose element count times the item size overflows or
// differs from the data length; an aux index out of range or used twice; an
// aux frame no array references.
//
// # Uninterpreted fields
//
// A field zmqguard does not interpret (kv_transfer_params, trace_headers,
// prefill_stats, a utility result...) is a []byte holding the msgpack
// encoding of the sub-object, checked by msgpscan.Scan and pointing into
// the frame; nil means the field was absent (msgpack nil on the wire). The
// encoder writes such a field verbatim.
//
// # Aliasing and alignment
//
// Every []byte in a decoded Message (request ids, raw sub-objects, array
// data) points into the frames it was decoded from and is valid only as
// long as they are. Array data may sit at any address (inline data follows
// a msgpack header), so typed access goes through the accessors [Array.Int] and
// [Array.Float], which read little-endian bytes of any dtype.
package enginecore
