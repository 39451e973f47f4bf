package kvevents

import "fmt"

// SGLang's KV events (SGLang's python/sglang/srt/disaggregation/kv_events.py,
// events made by KVCacheEventMixin in mem_cache/events.py) are read by the
// same decoders as vLLM's: its events are tagged arrays whose fields are a
// prefix of vLLM's array form (see sglangStored), its batch is [ts, events,
// attn_dp_rank] (attn_dp_rank in Batch.DataParallelRank), its hashes are
// signed int64 (kept signed, see Hash), its bigram token pairs are kept
// (Event.TokenPairs), and its replay replies carry no topic frame, as
// vLLM's before PR #45177. Source.Engine "sglang" changes only how elements
// after SGLang's fields are read; PublisherConfig.Engine "sglang" writes
// SGLang's bytes.

// checkEngine checks Source.Engine.
func checkEngine(engine string) error {
	switch engine {
	case "", "vllm", "sglang":
		return nil
	}
	return fmt.Errorf("kvevents: Source.Engine %q unknown (want \"vllm\" or \"sglang\")", engine)
}

// lim is the decoder's limits for this source: the Subscriber's, with the
// source's engine.
func (so *source) lim() limits {
	l := so.sub.cfg.lim()
	l.SGLang = so.src.Engine == "sglang"
	return l
}
