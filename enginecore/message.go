package enginecore

// Message is one complete EngineCoreOutputs message: the [Header] plus the
// request outputs, the utility output and the finished request ids.
// [Decode] fills it from the frames; [Encoder] writes it.
//
// Decoding into a reused Message reuses every slice it holds (Outputs and,
// per output, the token ids, events and array shapes), so once the slices
// have grown to the largest message seen, a decode allocates nothing.
// Every []byte points into the decoded frames (see the package doc).
type Message struct {
	Header
	// Outputs are the request outputs (len(Outputs) == OutputsLen).
	Outputs []Output
	// Utility is the utility output, when HasUtilityOutput is set.
	Utility UtilityOutput
	// FinishedRequestIDs are finished_requests' ids, when
	// HasFinishedRequests is set.
	FinishedRequestIDs [][]byte
	// StatsRaw is scheduler_stats as received (the whole map, every field
	// of the engine's release), set by [Decode] when HasStats is set and
	// pointing into the frame. The [Encoder] writes it verbatim when it is
	// non-nil and HasStats is set, else it writes Stats with
	// [appendSchedulerStats].
	StatsRaw []byte

	used []uint64 // aux frames referenced so far, one bit per frame
}

// FinishReason is vLLM's FinishReason (an IntEnum on the wire).
type FinishReason int64

// vLLM's finish reasons.
const (
	FinishStop       FinishReason = 0
	FinishLength     FinishReason = 1
	FinishAbort      FinishReason = 2
	FinishError      FinishReason = 3
	FinishRepetition FinishReason = 4
)

// Output is one EngineCoreOutput: the new tokens (and whatever else) of one
// request in one engine step. On the wire it is an array_like msgspec
// struct, which vLLM writes with every field (14 at vLLM main of
// 2026-08-07); when decoding only request_id and new_token_ids are
// required, and fields after the 17 known here are skipped.
type Output struct {
	// Fields is the number of array elements on the wire. Encoders ignore
	// it.
	Fields int
	// RequestID is request_id.
	RequestID []byte
	// NewTokenIDs is new_token_ids.
	NewTokenIDs []int64
	// left records what the decoder left set after new_token_ids, for
	// reset: leftUnknown (a value built by hand, or a failed decode: clear
	// everything), leftNothing, or leftLogprobs (new_logprobs only). It
	// sits beside the fields every decode writes: an Output is over a
	// kilobyte, and a common output then touches one cache line of it.
	left uint8
	// NewLogprobs is new_logprobs (LogprobsLists), when Present.
	NewLogprobs Logprobs
	// NewPromptLogprobs is new_prompt_logprobs_tensors (LogprobsTensors),
	// when Present.
	NewPromptLogprobs Logprobs
	// PoolingOutput is pooling_output (a tensor), unless IsNil.
	PoolingOutput Array
	// HasFinishReason reports that finish_reason was set: the request
	// finished with FinishReason.
	HasFinishReason bool
	FinishReason    FinishReason
	// StopReason is stop_reason: nil, an int (a stop token) or a str (a
	// stop string).
	StopReason StopReason
	// HasEvents reports that events was a list (possibly empty).
	HasEvents bool
	Events    []Event
	// KVTransferParams, ECTransferParams, TraceHeaders and PrefillStats are
	// kv_transfer_params, ec_transfer_params, trace_headers and
	// prefill_stats, uninterpreted.
	KVTransferParams []byte
	ECTransferParams []byte
	TraceHeaders     []byte
	PrefillStats     []byte
	// RoutedExperts is routed_experts (an ndarray), unless IsNil.
	RoutedExperts Array
	// NumNaNsInLogits is num_nans_in_logits (default 0).
	NumNaNsInLogits int64
	// MMCacheMissHashes is mm_cache_miss_hashes ([str]), uninterpreted.
	MMCacheMissHashes []byte
	// NewSamplingMask is new_sampling_mask, when Present.
	NewSamplingMask SamplingMask
	// SpecDecodeMetrics is spec_decode_metrics, uninterpreted.
	SpecDecodeMetrics []byte
}

// Logprobs is LogprobsLists (new_logprobs) or LogprobsTensors
// (new_prompt_logprobs_tensors): [logprob_token_ids [n, k+1],
// logprobs [n, k+1], sampled_token_ranks [n], cu_num_generated_tokens
// [int]|nil], the last field only in the four-field form.
type Logprobs struct {
	// Present reports that the field was set (not nil).
	Present bool
	// Fields is the tuple's length on the wire (3 or 4). The encoder writes
	// 4 fields when Fields is 4 or HasCuNumGenerated is set, else 3.
	Fields       int
	TokenIDs     Array
	Logprobs     Array
	SampledRanks Array
	// HasCuNumGenerated reports that cu_num_generated_tokens was a list.
	HasCuNumGenerated bool
	CuNumGenerated    []int64
}

// SamplingMask is new_sampling_mask (SamplingMaskLists): [token_ids,
// offsets|nil, cu_num_generated_tokens [int]|nil, logprobs|nil], arrays
// except the third; older engines send the first three only.
type SamplingMask struct {
	Present           bool
	Fields            int
	TokenIDs          Array
	Offsets           Array
	HasCuNumGenerated bool
	CuNumGenerated    []int64
	Logprobs          Array
}

// EventType is EngineCoreEventType.
type EventType int64

// vLLM's engine-core event types.
const (
	EventQueued    EventType = 1
	EventScheduled EventType = 2
	EventPreempted EventType = 3
)

// Event is one EngineCoreEvent: a msgspec struct encoded as a map
// {"type": int, "timestamp": float}.
type Event struct {
	Type      EventType
	Timestamp float64
}

// StopKind says which form a stop_reason took.
type StopKind uint8

// The forms of stop_reason.
const (
	StopNone StopKind = iota // nil
	StopInt                  // a stop token id
	StopStr                  // a stop string
)

// StopReason is stop_reason: nil, an int or a str.
type StopReason struct {
	Kind StopKind
	Int  int64
	Str  []byte
}

// The negative call ids vLLM uses for utility outputs nobody called for
// (vllm/v1/engine/__init__.py): an elastic-EP notification (vLLM PR #34861,
// EEP_NOTIFICATION_CALL_ID) and a fault-tolerance status push (vLLM PR
// #44428, FT_STATUS_CALL_ID). Replies to calls carry uuid1().int >> 64, a
// uint64.
const (
	callIDEEPNotification int64 = -1
	callIDFTStatus        int64 = -2
)

// UtilityOutput is the reply to a utility call, or a message the engine
// sends unasked under a negative call id: [call_id, failure_message
// str|nil, result [type_info, value]|nil], all three always on the wire.
type UtilityOutput struct {
	// CallID is the id of the call this replies to (when Special is 0).
	CallID uint64
	// Special is a negative call_id: -1 (an elastic-EP notification),
	// -2 (a fault-tolerance status), or another negative value a later vLLM may use. It
	// is 0 for a reply to a call (CallID then holds the id). The encoder
	// writes Special when it is negative, else CallID.
	Special int64
	// HasFailure reports that failure_message was set: the call failed.
	HasFailure     bool
	FailureMessage []byte
	// HasResult reports that result was set; ResultType is its type_info
	// (nil or a type description) and Result the value, both uninterpreted.
	HasResult  bool
	ResultType []byte
	Result     []byte
}
