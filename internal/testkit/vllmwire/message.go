package vllmwire

import "github.com/tinylib/msgp/msgp"

// StatsVector is a 101-byte EngineCoreOutputs as vLLM's engine core sends
// it to the DP coordinator: docs/protocol.md §2's "minimal stats" vector (engine
// 1, running 3, waiting 5, step 42, wave 7, timestamp 12345.678) with
// kv_cache_usage 0.25 added, encoded by Python's msgpack.
const StatsVector = "\x94\x01\x90\x85" +
	"\xb0num_running_reqs\x03" +
	"\xb0num_waiting_reqs\x05" +
	"\xacstep_counter\x2a" +
	"\xaccurrent_wave\x07" +
	"\xaekv_cache_usage\xcb\x3f\xd0\x00\x00\x00\x00\x00\x00" +
	"\xcb\x40\xc8\x1c\xd6\xc8\xb4\x39\x58"

// Message is an EngineCoreOutputs that decodes into itself without
// allocating on repeated use: its scheduler statistics live inside the
// Message, and Reset keeps slice capacity. A Message must not be copied
// after its first decode (SchedulerStats may point into it).
type Message struct {
	EngineCoreOutputs
	stats SchedulerStats
}

// Reset zeroes m, keeping the capacity of Outputs, so that fields missing
// from the next frame (vLLM omits trailing defaults) read as their defaults
// instead of the previous message's values.
func (m *Message) Reset() {
	outs := m.Outputs[:0]
	m.EngineCoreOutputs = EngineCoreOutputs{Outputs: outs}
	m.stats = SchedulerStats{}
}

// UnmarshalMsg decodes one EngineCoreOutputs frame into m, reusing m's own
// SchedulerStats storage. A frame whose tuple stops before scheduler_stats
// leaves SchedulerStats nil, as vLLM's default None.
func (m *Message) UnmarshalMsg(b []byte) ([]byte, error) {
	n, _, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, err
	}
	m.stats = SchedulerStats{}
	m.SchedulerStats = &m.stats
	rest, err := m.EngineCoreOutputs.UnmarshalMsg(b)
	if n < 3 {
		m.SchedulerStats = nil
	}
	return rest, err
}
