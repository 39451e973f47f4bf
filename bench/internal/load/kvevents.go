package load

import (
	"encoding/binary"

	"github.com/zmqguard/zmqguard/kvevents"
)

// KVBatch returns the payload of one KV-event batch as vLLM v0.26 sends it
// (map-form events, integer block hashes, DP rank 0): 16 BlockStored events
// of 4 blocks and 64 tokens each and 4 BlockRemoved events, what a busy
// engine step publishes. KVBatchEvents is its event count.
func KVBatch() []byte {
	var evs []kvevents.Event
	for i := uint64(0); i < 16; i++ {
		base := i * 4
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, Medium: kvevents.Some("GPU"),
			ParentBlockHash: kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(base * 0x9e3779b97f4a7c15), Valid: i > 0}}
		for j := uint64(0); j < 4; j++ {
			ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash((base+j+1)*0x9e3779b97f4a7c15))
		}
		for j := int64(0); j < 64; j++ {
			ev.TokenIDs = append(ev.TokenIDs, (int64(base)*64+j*7919)%151000)
		}
		evs = append(evs, ev)
	}
	for i := uint64(0); i < 4; i++ {
		evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
			BlockHashes: []kvevents.Hash{kvevents.IntHash(0x9e3779b97f4a7c15 + i)}})
	}
	return kvevents.AppendBatch(nil, 1.7e9, evs, kvevents.Some[int64](0), true)
}

// KVBatchEvents is the number of events in KVBatch.
const KVBatchEvents = 20

// KVChunk returns count live KV-event messages [topic, seq, payload] as one
// ZMTP byte stream, and the offset in it of each message's 8-byte sequence
// number, so that a sender can renumber the chunk before each write
// (SetSeqs).
func KVChunk(topic string, payload []byte, count int) (buf []byte, seqAt []int) {
	var one []byte
	one = AppendFrame(one, []byte(topic), true)
	at := len(one) + 2 // the 8-byte seq frame has a 2-byte header
	one = AppendFrame(one, make([]byte, 8), true)
	one = AppendFrame(one, payload, false)
	buf = make([]byte, 0, len(one)*count)
	for i := range count {
		seqAt = append(seqAt, i*len(one)+at)
		buf = append(buf, one...)
	}
	return buf, seqAt
}

// SetSeqs numbers the messages of a KVChunk n, n+1, ... (big-endian, as
// vLLM's publisher does) and returns the next number.
func SetSeqs(buf []byte, seqAt []int, n uint64) uint64 {
	for _, at := range seqAt {
		binary.BigEndian.PutUint64(buf[at:], n)
		n++
	}
	return n
}
