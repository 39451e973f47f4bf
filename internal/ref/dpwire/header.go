package dpwire

import (
	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/enginecore"
)

// AppendHeader appends h as the one-frame EngineCoreOutputs an engine
// pushes to the coordinator's back output socket, as vLLM writes it: all 8
// fields, defaults included, no request outputs, no utility output and no
// finished requests (OutputsLen, HasUtilityOutput, FinishedRequests and
// Fields are ignored). It is enginecore's Encoder on a Message holding h.
func AppendHeader(dst []byte, h *enginecore.Header) []byte {
	m := enginecore.Message{Header: *h}
	m.HasUtilityOutput, m.HasFinishedRequests = false, false
	var e enginecore.Encoder
	return append(dst, e.Encode(&m)[0]...)
}

// AppendSchedulerStats appends s as vLLM's engine writes its
// SchedulerStats dataclass (a map of every field, the ones enginecore does
// not model at their defaults): the scheduler_stats element of
// [AppendHeader]'s message.
func AppendSchedulerStats(dst []byte, s *enginecore.SchedulerStats) []byte {
	b := AppendHeader(nil, &enginecore.Header{HasStats: true, Stats: *s})
	// [engine_index, outputs, scheduler_stats, ...]: skip the array header
	// and the first two elements.
	_, rest, _ := msgp.ReadArrayHeaderBytes(b)
	rest, _ = msgp.Skip(rest)
	rest, _ = msgp.Skip(rest)
	end, _ := msgp.Skip(rest)
	return append(dst, rest[:len(rest)-len(end)]...)
}
