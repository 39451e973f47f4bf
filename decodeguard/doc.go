// Package decodeguard is zmqguard's vocabulary of bad input: why a peer's
// input was refused ([Reason]), how many times ([Counts]), and the
// classified error that carries the reason ([Error]).
//
//	err := decodeguard.NewError(decodeguard.ReasonValidate, "negative wave number")
//	var dropped decodeguard.Counts
//	if decodeguard.IsBadInput(err) { // a peer's fault: drop, count, go on
//		dropped[decodeguard.ReasonOf(err)]++
//	}
//	fmt.Println(dropped.Total(), decodeguard.ReasonOf(err)) // 1 validate
//
// Every layer of zmqguard maps each way a peer can be wrong to exactly one
// Reason of a closed set, so counters indexed by Reason add up, and every
// Stats of the project reports drops and refusals as Counts (JSON: an
// object of the non-zero counts keyed by reason name). [IsBadInput] tells a
// classified error apart from a genuine failure (a bug, a closed socket, a
// cancelled context), which must surface instead of being dropped.
//
// [Limits] configures the structural msgpack pre-scan that every decode of
// the project runs before a decoder allocates anything a header claims (the
// loop package's MsgpDecoder and UntypedDecoder take one). The zero Limits
// means the defaults: depth 32, 262,144 objects, 1 MiB, scalar map keys
// only, no ext types.
//
// Error texts never carry raw peer bytes: a decoder's error or a panic
// value is escaped and capped before it becomes part of one. Everything
// here is safe for concurrent use.
package decodeguard
