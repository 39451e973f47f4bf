package outputs

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
	"github.com/zmqguard/zmqguard/socket"
)

// jsonArray is an array as the Python peer prints it.
func jsonArray(a *enginecore.Array) any {
	if a.IsNil() {
		return nil
	}
	name := numpyNames[a.DType.String()]
	if a.Torch || name == "" {
		name = a.DType.String()
	}
	data := []float64{}
	for i := range a.Len() {
		data = append(data, a.Float(i))
	}
	return map[string]any{"dtype": name, "shape": append([]int{}, a.Shape...), "data": data}
}

// numpyNames maps a dtype's torch-style name to numpy's dtype.str.
var numpyNames = map[string]string{
	"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2",
	"int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
	"float16": "<f2", "float32": "<f4", "float64": "<f8",
}

func jsonLogprobs(l *enginecore.Logprobs) any {
	if !l.Present {
		return nil
	}
	var cu any
	if l.HasCuNumGenerated {
		cu = append([]int64{}, l.CuNumGenerated...)
	}
	return map[string]any{"ids": jsonArray(&l.TokenIDs), "logprobs": jsonArray(&l.Logprobs),
		"ranks": jsonArray(&l.SampledRanks), "cu": cu}
}

func rawValue(t testing.TB, r []byte) any {
	if r == nil {
		return nil
	}
	v, _, err := msgp.ReadIntfBytes(r)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// jsonMessage renders m in the Python peer's JSON shape, normalised
// through encoding/json.
func jsonMessage(t testing.TB, m *enginecore.Message) any {
	outs := []any{}
	for i := range m.Outputs {
		o := &m.Outputs[i]
		var finish, stop, events any
		if o.HasFinishReason {
			finish = int64(o.FinishReason)
		}
		switch o.StopReason.Kind {
		case enginecore.StopInt:
			stop = o.StopReason.Int
		case enginecore.StopStr:
			stop = string(o.StopReason.Str)
		}
		if o.HasEvents {
			evs := []any{}
			for _, e := range o.Events {
				evs = append(evs, []any{int64(e.Type), e.Timestamp})
			}
			events = evs
		}
		outs = append(outs, map[string]any{
			"request_id": string(o.RequestID), "new_token_ids": append([]int64{}, o.NewTokenIDs...),
			"finish_reason": finish, "stop_reason": stop,
			"new_logprobs": jsonLogprobs(&o.NewLogprobs), "prompt_logprobs": jsonLogprobs(&o.NewPromptLogprobs),
			"pooling_output": jsonArray(&o.PoolingOutput), "routed_experts": jsonArray(&o.RoutedExperts),
			"events": events, "nans": o.NumNaNsInLogits})
	}
	var finished, util any
	if m.HasFinishedRequests {
		ids := []string{}
		for _, id := range m.FinishedRequestIDs {
			ids = append(ids, string(id))
		}
		finished = ids
	}
	if m.HasUtilityOutput {
		u := &m.Utility
		var failure, result any
		if u.HasFailure {
			failure = string(u.FailureMessage)
		}
		if u.HasResult {
			result = rawValue(t, u.Result)
		}
		util = map[string]any{"call_id": u.CallID, "failure": failure, "result": result}
	}
	return normalise(t, map[string]any{"engine": m.EngineIndex, "timestamp": m.Timestamp,
		"finished": finished, "outputs": outs, "utility": util})
}

func normalise(t testing.TB, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func parseLine(t testing.TB, line string) any {
	var v any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("python printed %q: %v", line, err)
	}
	return v
}

// A pyzmq engine (numpy arrays inline and in aux frames, logprobs, torch
// tensors, events, utility outputs, a finished request, a junk frame first
// and ENGINE_CORE_DEAD last) → the Go receiver's values equal what was sent.
func TestInteropPythonEngine(t *testing.T) {
	py := pypeer.Require(t, "zmq", "msgpack", "numpy")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var gotMsgs []any
	var callID uint64
	deadc := make(chan EngineDeadError, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	r, wait := start(t, rctx, Config{
		Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
			mu.Lock()
			defer mu.Unlock()
			gotMsgs = append(gotMsgs, jsonMessage(t, m))
			if m.HasUtilityOutput && m.Utility.HasResult {
				callID = m.Utility.CallID
			}
			return nil
		},
		OnEngineDead: func(e EngineDeadError) { deadc <- e },
	})
	out, err := exec.CommandContext(ctx, py, filepath.Join("testdata", "engine.py"), "push", r.Endpoint()).Output()
	if err != nil {
		t.Fatalf("python engine: %v", err)
	}
	var want []any
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		want = append(want, parseLine(t, line))
	}
	var dead EngineDeadError
	select {
	case dead = <-deadc:
	case <-ctx.Done():
		t.Fatal("no ENGINE_CORE_DEAD within 30 s")
	}
	stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if len(gotMsgs) != len(want) || len(want) != 4 {
		t.Fatalf("received %d messages, python sent %d", len(gotMsgs), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(gotMsgs[i], want[i]) {
			g, _ := json.Marshal(gotMsgs[i])
			w, _ := json.Marshal(want[i])
			t.Errorf("message %d:\n got %s\nwant %s", i, g, w)
		}
	}
	if callID != 0xab54a98ceb1f0ad2 {
		t.Errorf("call_id %#x", callID)
	}
	st := r.Stats()
	if dead.Engine != 0 || st.EngineDead != 1 || st.Dropped[decodeguard.ReasonDecode] != 1 || st.Messages != 4 {
		t.Errorf("dead %+v, stats %+v", dead, st)
	}
}

// The Go encoder → a pyzmq front-end decodes the same values.
func TestInteropGoEncoderToPython(t *testing.T) {
	py := pypeer.Require(t, "zmq", "msgpack", "numpy")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs := goScenario()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "engine.py"), "pull", "3")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatal("python printed no endpoint")
	}
	p := pusher(t, strings.TrimSpace(sc.Text()))
	defer p.Close()
	var enc enginecore.Encoder
	for _, m := range msgs {
		frames := enc.Encode(m)
		send(t, ctx, p, frames...)
	}
	for i, m := range msgs {
		if !sc.Scan() {
			t.Fatalf("python printed %d of %d messages", i, len(msgs))
		}
		got, want := parseLine(t, sc.Text()), jsonMessage(t, m)
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("message %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

func i32le(v ...int32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return b
}

func goScenario() []*enginecore.Message {
	ids := make([]int32, 12*6)
	for i := range ids {
		ids[i] = int32(i * 5)
	}
	lps := make([]int32, 12*6) // float32 bits of -i/2
	for i := range lps {
		f := float32(-i) / 2
		lps[i] = int32(mathFloat32bits(f))
	}
	return []*enginecore.Message{
		{Header: enginecore.Header{EngineIndex: 2, Timestamp: 3.5, HasFinishedRequests: true},
			Outputs: []enginecore.Output{{
				RequestID: []byte("g-1"), NewTokenIDs: []int64{1, 2},
				NewLogprobs: enginecore.Logprobs{Present: true, Fields: 4,
					TokenIDs:          enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{12, 6}, Data: i32le(ids...)},
					Logprobs:          enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{12, 6}, Data: i32le(lps...)},
					SampledRanks:      enginecore.Array{DType: enginecore.DTypeOf("int64"), Shape: []int{1}, Data: make([]byte, 8)},
					HasCuNumGenerated: true, CuNumGenerated: []int64{0, 1}},
				HasFinishReason: true, FinishReason: enginecore.FinishStop,
				StopReason: enginecore.StopReason{Kind: enginecore.StopStr, Str: []byte("\n\n")},
			}},
			FinishedRequestIDs: [][]byte{[]byte("g-1")}},
		{Header: enginecore.Header{Timestamp: 4.5},
			Outputs: []enginecore.Output{{
				RequestID:     []byte("p-1"),
				PoolingOutput: enginecore.Array{DType: enginecore.DTypeOf("bfloat16"), Torch: true, Shape: []int{2}, Data: []byte{0x80, 0x3f, 0x00, 0xc0}},
				RoutedExperts: enginecore.Array{DType: enginecore.DTypeOf("int16"), Shape: []int{1, 2}, Data: []byte{7, 0, 8, 0}},
				HasEvents:     true, Events: []enginecore.Event{{Type: enginecore.EventQueued, Timestamp: 0.5}},
				NumNaNsInLogits: 1,
			}}},
		{Header: enginecore.Header{EngineIndex: 1, Timestamp: 5.5, HasUtilityOutput: true},
			Utility: enginecore.UtilityOutput{CallID: 42, HasResult: true, ResultType: []byte{0xc0}, Result: []byte{0x93, 1, 2, 3}}},
	}
}
