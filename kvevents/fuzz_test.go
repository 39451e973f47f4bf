package kvevents

import (
	"bytes"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
)

// splitFrames turns fuzz input into frames: each frame is a length byte and
// that many bytes; the last frame takes whatever is left.
func splitFrames(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 && len(out) < 8 {
		n := int(b[0])
		b = b[1:]
		if n > len(b) {
			n = len(b)
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func joinFrames(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = append(b, byte(len(f)))
		b = append(b, f...)
	}
	return b
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(batchOf(f, vecStoredMap, vecRemovedMap, vecClearedMap))
	f.Add(batchOf(f, vecRemovedArr, vecClearedArr))
	f.Add(unhex(f, vecBatch))
	f.Add(payloadOf(3))
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		var a Batch
		err := decodeBatch(p, limits{MaxPayload: 1 << 16, MaxEvents: 256}, &a, func(d eventDrop) {
			if !decodeguard.IsBadInput(d.Err) {
				t.Fatalf("unclassified event drop: %v", d.Err)
			}
		})
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if len(a.Events) != len(a.Index) || len(a.Events)+a.DroppedEvents > 256 {
			t.Fatalf("events %d index %d dropped %d", len(a.Events), len(a.Index), a.DroppedEvents)
		}
		// Re-encoding what was decoded reaches a fixpoint in every form:
		// vLLM's arrays and maps, and SGLang's arrays (read back with an
		// SGLang source's limits).
		for _, form := range []int{formArray, formMap, formSGLang} {
			q := appendBatch(nil, a.TS, a.Events, a.DataParallelRank, form)
			var b Batch
			if err := decodeBatch(q, limits{MaxPayload: 1 << 24, SGLang: form == formSGLang}, &b, nil); err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			if r := appendBatch(nil, b.TS, b.Events, b.DataParallelRank, form); !bytes.Equal(q, r) {
				t.Fatalf("no fixpoint (form %d):\n%x\n%x", form, q, r)
			}
		}
	})
}

func FuzzLiveFrames(f *testing.F) {
	f.Add(joinFrames([]byte("kv@"), make([]byte, 8), payloadOf(0)))
	f.Add(joinFrames([]byte("kv@"), []byte{1, 2, 3}, payloadOf(0)))
	f.Add(joinFrames([]byte("kv@")))
	f.Fuzz(func(t *testing.T, in []byte) {
		seq, payload, err := parseLive(splitFrames(in), 1<<10)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified: %v", err)
			}
			return
		}
		if len(payload) > 1<<10 {
			t.Fatalf("payload of %d accepted", len(payload))
		}
		_ = seq
	})
}

func FuzzReplayReply(f *testing.F) {
	end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	f.Add(joinFrames(nil, []byte("kv@p"), make([]byte, 8), payloadOf(0)))
	f.Add(joinFrames(nil, make([]byte, 8), payloadOf(0)))
	f.Add(joinFrames(nil, nil, end, nil))
	f.Add(joinFrames(nil, end, nil))
	f.Add(joinFrames([]byte{1}, end, nil))
	f.Add(joinFrames(nil, []byte("kv@p"), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}, nil))
	// SGLang's replies and end marker as its ROUTER sent them (no topic).
	for _, v := range golden.LoadSGLang(f, "kv-events") {
		if m := v.Message(); m == "kv_replay_reply" || m == "kv_replay_end" {
			frames, err := v.Frames()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(joinFrames(frames...))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		frames := splitFrames(in)
		seq, payload, isEnd, err := parseReply(frames, "kv@", 1<<10)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified: %v", err)
			}
			return
		}
		// Both markers end a replay: the end marker (-1) and zmqguard's
		// error marker (-2, replayErrorSeq).
		if isEnd != (seq == endSeq || seq == replayErrorSeq) || len(payload) > 1<<10 || len(frames[0]) != 0 {
			t.Fatalf("accepted %v %d %d", isEnd, seq, len(payload))
		}
	})
}

func FuzzReplayRequest(f *testing.F) {
	f.Add(joinFrames([]byte{0, 0, 0, 0, 1}, nil, make([]byte, 8)))
	f.Add(joinFrames([]byte{0, 0, 0, 0, 1}, nil, []byte{1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		frames := splitFrames(in)
		_, _, err := parseRequest(frames)
		if err != nil && !decodeguard.IsBadInput(err) {
			t.Fatalf("unclassified: %v", err)
		}
		if err == nil && (len(frames) != 3 || len(frames[2]) != 8) {
			t.Fatalf("accepted %d frames", len(frames))
		}
	})
}
