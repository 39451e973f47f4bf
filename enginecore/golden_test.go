package enginecore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
)

// TestGoldenEngineOutputs runs every engine-outputs vector (bytes written by
// vLLM's own engine core at the vectors' commit): Decode must yield exactly
// values.decoded, and the Encoder, fed a Message built from values (not from
// the decode), must write the frames byte for byte.
func TestGoldenEngineOutputs(t *testing.T) {
	vs := golden.Load(t, "engine-outputs")
	n := 0
	for _, v := range vs {
		if v.Message() != "engine_core_outputs" {
			continue
		}
		n++
		t.Run(v.ID, func(t *testing.T) { checkGoldenOutputs(t, v, true) })
	}
	if n != 51 {
		t.Fatalf("%d engine_core_outputs vectors, want 51", n)
	}
}

// checkGoldenOutputs decodes v with Decode (and DecodeHeader) and compares
// with values.decoded; with encode it also encodes values and compares
// the frames.
func checkGoldenOutputs(t *testing.T, v golden.Vector, encode bool) {
	t.Helper()
	frames, err := v.Frames()
	if err != nil {
		t.Fatal(err)
	}
	var vals struct {
		Decoded json.RawMessage `json:"decoded"`
	}
	if err := json.Unmarshal(v.Values, &vals); err != nil {
		t.Fatal(err)
	}
	want, err := parseNode(vals.Decoded)
	if err != nil {
		t.Fatal(err)
	}

	var m Message
	if err := Decode(frames, &m, &Limits{Scan: largeScan()}); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	got := renderMessage(t, &m, frames)
	if diff := compareNodes("decoded", got, want); diff != "" {
		t.Fatalf("Decode differs from values: %s", diff)
	}
	if len(frames) == 1 {
		var h Header
		lim := largeScan()
		lim.AllowExt = rawViewOnly
		if err := DecodeHeader(frames[0], &lim, &h); err != nil {
			t.Fatalf("DecodeHeader: %v", err)
		}
		if h != m.Header {
			t.Fatalf("DecodeHeader %+v, Decode %+v", h, m.Header)
		}
	}
	if !encode || !v.ByteExact {
		return
	}
	built := messageFromNode(t, want)
	var e Encoder
	out := e.Encode(built)
	if len(out) != len(frames) {
		t.Fatalf("encoded %d frames, vLLM sent %d", len(out), len(frames))
	}
	for i := range frames {
		if !bytes.Equal(out[i], frames[i]) {
			t.Fatalf("frame %d differs from vLLM's:\n got %s\nwant %s", i, hex.EncodeToString(out[i]), hex.EncodeToString(frames[i]))
		}
	}
	if built.HasStats && built.StatsRaw == nil {
		t.Logf("scheduler_stats written from the typed fields (appendSchedulerStats)")
	}
}

func largeScan() (l decodeguard.Limits) {
	l.MaxBytes = 64 << 20
	return l
}

// node is a JSON value with object key order kept, or a msgpack value
// rendered the way the vectors' README renders values.
type node struct {
	kind  byte // 'n' null, 'b' bool, 'i' int, 'f' float, 's' str, 'a' array, 'o' object
	b     bool
	num   string // 'i': decimal; 'f': a float64 in strconv 'g' form or NaN/+Inf/-Inf
	str   string
	arr   []node
	keys  []string
	vals  []node
	isHex bool // an object {"hex": ...} standing for bytes
}

func (n node) get(k string) (node, bool) {
	for i, kk := range n.keys {
		if kk == k {
			return n.vals[i], true
		}
	}
	return node{kind: 'n'}, false
}

func (n node) must(t *testing.T, k string) node {
	t.Helper()
	v, ok := n.get(k)
	if !ok {
		t.Fatalf("values: no key %q", k)
	}
	return v
}

func parseNode(raw []byte) (node, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return parseTok(d)
}

func parseTok(d *json.Decoder) (node, error) {
	tok, err := d.Token()
	if err != nil {
		return node{}, err
	}
	switch x := tok.(type) {
	case nil:
		return node{kind: 'n'}, nil
	case bool:
		return node{kind: 'b', b: x}, nil
	case json.Number:
		s := string(x)
		if strings.ContainsAny(s, ".eE") {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return node{}, err
			}
			return floatNode(f), nil
		}
		return node{kind: 'i', num: s}, nil
	case string:
		return node{kind: 's', str: x}, nil
	case json.Delim:
		if x == '[' {
			n := node{kind: 'a', arr: []node{}}
			for d.More() {
				c, err := parseTok(d)
				if err != nil {
					return node{}, err
				}
				n.arr = append(n.arr, c)
			}
			_, err := d.Token()
			return n, err
		}
		n := node{kind: 'o'}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return node{}, err
			}
			c, err := parseTok(d)
			if err != nil {
				return node{}, err
			}
			n.keys = append(n.keys, k.(string))
			n.vals = append(n.vals, c)
		}
		if _, err := d.Token(); err != nil {
			return node{}, err
		}
		n.isHex = len(n.keys) == 1 && n.keys[0] == "hex"
		return n, nil
	}
	return node{}, fmt.Errorf("unexpected token %v", tok)
}

func floatNode(f float64) node {
	switch {
	case math.IsNaN(f):
		return node{kind: 'f', num: "NaN"}
	case math.IsInf(f, 1):
		return node{kind: 'f', num: "+Inf"}
	case math.IsInf(f, -1):
		return node{kind: 'f', num: "-Inf"}
	}
	return node{kind: 'f', num: strconv.FormatFloat(f, 'g', -1, 64)}
}

func intNode(i int64) node {
	if i >= 1<<53 || i <= -(1<<53) {
		return node{kind: 's', str: strconv.FormatInt(i, 10)}
	}
	return node{kind: 'i', num: strconv.FormatInt(i, 10)}
}

func uintNode(u uint64) node {
	if u >= 1<<53 {
		return node{kind: 's', str: strconv.FormatUint(u, 10)}
	}
	return node{kind: 'i', num: strconv.FormatUint(u, 10)}
}

func strNode(s []byte) node { return node{kind: 's', str: string(s)} }

func hexNode(b []byte) node {
	return node{kind: 'o', keys: []string{"hex"}, vals: []node{{kind: 's', str: hex.EncodeToString(b)}}, isHex: true}
}

func obj(kv ...any) node {
	n := node{kind: 'o'}
	for i := 0; i < len(kv); i += 2 {
		n.keys = append(n.keys, kv[i].(string))
		n.vals = append(n.vals, kv[i+1].(node))
	}
	return n
}

var nullNode = node{kind: 'n'}

// normFloatStrings maps the README's renderings of non-finite floats to
// floatNode's.
func normFloat(n node) node {
	if n.kind == 's' {
		switch n.str {
		case "NaN":
			return node{kind: 'f', num: "NaN"}
		case "Infinity":
			return node{kind: 'f', num: "+Inf"}
		case "-Infinity":
			return node{kind: 'f', num: "-Inf"}
		}
	}
	return n
}

// compareNodes returns "" when got and want are equal (objects in key
// order), else the path of the first difference.
func compareNodes(path string, got, want node) string {
	got, want = normFloat(got), normFloat(want)
	if got.kind != want.kind {
		return fmt.Sprintf("%s: got %s, want %s", path, show(got), show(want))
	}
	switch got.kind {
	case 'b':
		if got.b != want.b {
			return fmt.Sprintf("%s: got %v, want %v", path, got.b, want.b)
		}
	case 'i', 'f':
		if got.num != want.num {
			return fmt.Sprintf("%s: got %s, want %s", path, got.num, want.num)
		}
	case 's':
		if got.str != want.str {
			return fmt.Sprintf("%s: got %q, want %q", path, got.str, want.str)
		}
	case 'a':
		if len(got.arr) != len(want.arr) {
			return fmt.Sprintf("%s: %d elements, want %d", path, len(got.arr), len(want.arr))
		}
		for i := range got.arr {
			if d := compareNodes(path+"["+strconv.Itoa(i)+"]", got.arr[i], want.arr[i]); d != "" {
				return d
			}
		}
	case 'o':
		if strings.Join(got.keys, ",") != strings.Join(want.keys, ",") {
			return fmt.Sprintf("%s: keys %v, want %v", path, got.keys, want.keys)
		}
		for i := range got.vals {
			if d := compareNodes(path+"."+got.keys[i], got.vals[i], want.vals[i]); d != "" {
				return d
			}
		}
	}
	return ""
}

func show(n node) string {
	switch n.kind {
	case 'n':
		return "null"
	case 'i', 'f':
		return n.num
	case 's':
		return strconv.Quote(n.str)
	}
	return string(n.kind)
}

// msgpackNode renders one msgpack object (an uninterpreted sub-object) as a node.
func msgpackNode(t *testing.T, b []byte) (node, []byte) {
	t.Helper()
	if len(b) == 0 {
		t.Fatal("msgpackNode: empty")
	}
	switch msgp.NextType(b) {
	case msgp.NilType:
		return nullNode, b[1:]
	case msgp.BoolType:
		v, o, err := msgp.ReadBoolBytes(b)
		mustOK(t, err)
		return node{kind: 'b', b: v}, o
	case msgp.IntType:
		v, o, err := msgp.ReadInt64Bytes(b)
		mustOK(t, err)
		return intNode(v), o
	case msgp.UintType:
		v, o, err := msgp.ReadUint64Bytes(b)
		mustOK(t, err)
		return uintNode(v), o
	case msgp.Float64Type, msgp.Float32Type:
		v, o, err := msgp.ReadFloat64Bytes(b)
		mustOK(t, err)
		return floatNode(v), o
	case msgp.StrType:
		v, o, err := msgp.ReadStringZC(b)
		mustOK(t, err)
		return strNode(v), o
	case msgp.BinType:
		v, o, err := msgp.ReadBytesZC(b)
		mustOK(t, err)
		return hexNode(v), o
	case msgp.ArrayType:
		k, o, err := msgp.ReadArrayHeaderBytes(b)
		mustOK(t, err)
		n := node{kind: 'a', arr: []node{}}
		for range k {
			var c node
			c, o = msgpackNode(t, o)
			n.arr = append(n.arr, c)
		}
		return n, o
	case msgp.MapType:
		k, o, err := msgp.ReadMapHeaderBytes(b)
		mustOK(t, err)
		n := node{kind: 'o'}
		for range k {
			var key []byte
			key, o, err = msgp.ReadStringZC(o)
			mustOK(t, err)
			var c node
			c, o = msgpackNode(t, o)
			n.keys = append(n.keys, string(key))
			n.vals = append(n.vals, c)
		}
		return n, o
	}
	t.Fatalf("msgpackNode: unexpected type %v", msgp.NextType(b))
	return node{}, nil
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func rawNode(t *testing.T, r []byte) node {
	t.Helper()
	if r == nil {
		return nullNode
	}
	n, rest := msgpackNode(t, r)
	if len(rest) != 0 {
		t.Fatalf("raw sub-object: %d bytes left", len(rest))
	}
	return n
}

// renderMessage renders a decoded Message as the vectors' README renders
// values.decoded.
func renderMessage(t *testing.T, m *Message, frames [][]byte) node {
	t.Helper()
	outs := node{kind: 'a', arr: []node{}}
	for i := range m.Outputs {
		outs.arr = append(outs.arr, renderOutput(t, &m.Outputs[i], frames))
	}
	stats := nullNode
	if m.HasStats {
		stats = rawNode(t, m.StatsRaw)
		// The typed fields agree with the map.
		for k, want := range map[string]node{
			keyNumRunningReqs: intNode(m.Stats.NumRunningReqs), keyNumWaitingReqs: intNode(m.Stats.NumWaitingReqs),
			keyNumSkippedWaitingReqs: intNode(m.Stats.NumSkippedWaitingReqs), keyStepCounter: intNode(m.Stats.StepCounter),
			keyCurrentWave: intNode(m.Stats.CurrentWave), keyKVCacheUsage: floatNode(m.Stats.KVCacheUsage),
		} {
			if got, _ := stats.get(k); compareNodes(k, got, want) != "" {
				t.Errorf("typed SchedulerStats.%s = %s, map holds %s", k, show(want), show(got))
			}
		}
	}
	util := nullNode
	if m.HasUtilityOutput {
		u := &m.Utility
		id := uintNode(u.CallID)
		if u.Special != 0 {
			id = intNode(u.Special)
		}
		fm := nullNode
		if u.HasFailure {
			fm = strNode(u.FailureMessage)
		}
		res := nullNode
		if u.HasResult {
			if tn := rawNode(t, u.ResultType); tn.kind != 'n' {
				t.Fatalf("utility type_info %s, vectors have nil", show(tn))
			}
			res = obj("result", rawNode(t, u.Result))
		}
		util = obj("call_id", id, "failure_message", fm, "result", res)
	}
	fin := nullNode
	if m.HasFinishedRequests {
		fin = node{kind: 'a', arr: []node{}}
		for _, id := range m.FinishedRequestIDs {
			fin.arr = append(fin.arr, strNode(id))
		}
	}
	opt := func(has bool, v int64) node {
		if !has {
			return nullNode
		}
		return intNode(v)
	}
	return obj("engine_index", intNode(m.EngineIndex), "outputs", outs, "scheduler_stats", stats,
		"timestamp", floatNode(m.Timestamp), "utility_output", util, "finished_requests", fin,
		"wave_complete", opt(m.HasWaveComplete, m.WaveComplete), "start_wave", opt(m.HasStartWave, m.StartWave))
}

func renderOutput(t *testing.T, o *Output, frames [][]byte) node {
	t.Helper()
	if o.Fields != outputFieldsDefault {
		t.Errorf("EngineCoreOutput with %d fields on the wire, vLLM at the vectors' commit writes %d", o.Fields, outputFieldsDefault)
	}
	toks := node{kind: 'a', arr: []node{}}
	for _, x := range o.NewTokenIDs {
		toks.arr = append(toks.arr, intNode(x))
	}
	fr := nullNode
	if o.HasFinishReason {
		fr = intNode(int64(o.FinishReason))
	}
	sr := nullNode
	switch o.StopReason.Kind {
	case StopInt:
		sr = intNode(o.StopReason.Int)
	case StopStr:
		sr = strNode(o.StopReason.Str)
	}
	ev := nullNode
	if o.HasEvents {
		ev = node{kind: 'a', arr: []node{}}
		for _, e := range o.Events {
			ev.arr = append(ev.arr, obj("type", intNode(int64(e.Type)), "timestamp", floatNode(e.Timestamp)))
		}
	}
	return obj("request_id", strNode(o.RequestID), "new_token_ids", toks,
		"new_logprobs", renderLogprobs(t, &o.NewLogprobs, "sampled_token_ranks", frames),
		"new_prompt_logprobs_tensors", renderLogprobs(t, &o.NewPromptLogprobs, "selected_token_ranks", frames),
		"pooling_output", renderArray(t, &o.PoolingOutput, frames), "finish_reason", fr, "stop_reason", sr,
		"events", ev, "kv_transfer_params", rawNode(t, o.KVTransferParams), "ec_transfer_params", rawNode(t, o.ECTransferParams),
		"trace_headers", rawNode(t, o.TraceHeaders), "prefill_stats", rawNode(t, o.PrefillStats),
		"routed_experts", renderArray(t, &o.RoutedExperts, frames), "num_nans_in_logits", intNode(o.NumNaNsInLogits))
}

func renderLogprobs(t *testing.T, l *Logprobs, ranks string, frames [][]byte) node {
	t.Helper()
	if !l.Present {
		return nullNode
	}
	cu := nullNode
	if l.HasCuNumGenerated {
		cu = node{kind: 'a', arr: []node{}}
		for _, x := range l.CuNumGenerated {
			cu.arr = append(cu.arr, intNode(x))
		}
	}
	return obj("logprob_token_ids", renderArray(t, &l.TokenIDs, frames), "logprobs", renderArray(t, &l.Logprobs, frames),
		ranks, renderArray(t, &l.SampledRanks, frames), "cu_num_generated_tokens", cu)
}

func renderArray(t *testing.T, a *Array, frames [][]byte) node {
	t.Helper()
	if a.IsNil() {
		return nullNode
	}
	name := a.DType.numpy()
	if a.Torch || name == "" {
		name = a.DType.String()
	}
	shape := node{kind: 'a', arr: []node{}}
	for _, d := range a.Shape {
		shape.arr = append(shape.arr, intNode(int64(d)))
	}
	data := node{kind: 'a', arr: []node{}}
	for i := range a.Len() {
		if a.DType.isFloat() {
			data.arr = append(data.arr, floatNode(a.Float(i)))
		} else {
			data.arr = append(data.arr, intNode(a.Int(i)))
		}
	}
	buf := node{kind: 's', str: "inline"}
	if a.Frame != 0 {
		buf = intNode(int64(a.Frame))
		if &frames[a.Frame][0] != &a.Data[0] {
			t.Errorf("array data is not a view of aux frame %d", a.Frame)
		}
	}
	return obj("dtype", node{kind: 's', str: name}, "shape", shape, "data", data, "buffer", buf)
}

// The encode side: a Message built from values.

func messageFromNode(t *testing.T, n node) *Message {
	t.Helper()
	m := &Message{}
	m.EngineIndex = nodeInt(t, n.must(t, "engine_index"))
	for _, o := range n.must(t, "outputs").arr {
		m.Outputs = append(m.Outputs, outputFromNode(t, o))
	}
	if s := n.must(t, "scheduler_stats"); s.kind != 'n' {
		m.HasStats = true
		st := &m.Stats
		st.NumRunningReqs = nodeInt(t, s.must(t, keyNumRunningReqs))
		st.NumWaitingReqs = nodeInt(t, s.must(t, keyNumWaitingReqs))
		st.NumSkippedWaitingReqs = nodeInt(t, s.must(t, keyNumSkippedWaitingReqs))
		st.StepCounter = nodeInt(t, s.must(t, keyStepCounter))
		st.CurrentWave = nodeInt(t, s.must(t, keyCurrentWave))
		st.KVCacheUsage = nodeFloat(t, s.must(t, keyKVCacheUsage))
		// The typed encoder writes the other fields at their defaults;
		// a map with other values travels as raw msgpack.
		typed := appendSchedulerStats(nil, st)
		full := appendNode(t, nil, s)
		if !bytes.Equal(typed, full) {
			m.StatsRaw = full
		}
	}
	m.Timestamp = nodeFloat(t, n.must(t, "timestamp"))
	if u := n.must(t, "utility_output"); u.kind != 'n' {
		m.HasUtilityOutput = true
		id := u.must(t, "call_id")
		if id.kind == 's' {
			v, err := strconv.ParseUint(id.str, 10, 64)
			mustOK(t, err)
			m.Utility.CallID = v
		} else if v := nodeInt(t, id); v < 0 {
			m.Utility.Special = v
		} else {
			m.Utility.CallID = uint64(v)
		}
		if f := u.must(t, "failure_message"); f.kind != 'n' {
			m.Utility.HasFailure, m.Utility.FailureMessage = true, []byte(f.str)
		}
		if r := u.must(t, "result"); r.kind != 'n' {
			m.Utility.HasResult = true
			m.Utility.ResultType = []byte{0xc0}
			m.Utility.Result = appendNode(t, nil, r.must(t, "result"))
		}
	}
	if f := n.must(t, "finished_requests"); f.kind != 'n' {
		m.HasFinishedRequests = true
		for _, id := range f.arr {
			m.FinishedRequestIDs = append(m.FinishedRequestIDs, []byte(id.str))
		}
	}
	if w := n.must(t, "wave_complete"); w.kind != 'n' {
		m.HasWaveComplete, m.WaveComplete = true, nodeInt(t, w)
	}
	if w := n.must(t, "start_wave"); w.kind != 'n' {
		m.HasStartWave, m.StartWave = true, nodeInt(t, w)
	}
	return m
}

func outputFromNode(t *testing.T, n node) Output {
	t.Helper()
	var o Output
	o.RequestID = []byte(n.must(t, "request_id").str)
	o.NewTokenIDs = []int64{}
	for _, x := range n.must(t, "new_token_ids").arr {
		o.NewTokenIDs = append(o.NewTokenIDs, nodeInt(t, x))
	}
	o.NewLogprobs = logprobsFromNode(t, n.must(t, "new_logprobs"), "sampled_token_ranks")
	o.NewPromptLogprobs = logprobsFromNode(t, n.must(t, "new_prompt_logprobs_tensors"), "selected_token_ranks")
	o.PoolingOutput = arrayFromNode(t, n.must(t, "pooling_output"))
	if f := n.must(t, "finish_reason"); f.kind != 'n' {
		o.HasFinishReason, o.FinishReason = true, FinishReason(nodeInt(t, f))
	}
	switch s := n.must(t, "stop_reason"); s.kind {
	case 'i':
		o.StopReason = StopReason{Kind: StopInt, Int: nodeInt(t, s)}
	case 's':
		o.StopReason = StopReason{Kind: StopStr, Str: []byte(s.str)}
	}
	if ev := n.must(t, "events"); ev.kind != 'n' {
		o.HasEvents = true
		for _, e := range ev.arr {
			o.Events = append(o.Events, Event{Type: EventType(nodeInt(t, e.must(t, "type"))), Timestamp: nodeFloat(t, e.must(t, "timestamp"))})
		}
	}
	raw := func(k string) []byte {
		v := n.must(t, k)
		if v.kind == 'n' {
			return nil
		}
		return appendNode(t, nil, v)
	}
	o.KVTransferParams = raw("kv_transfer_params")
	o.ECTransferParams = raw("ec_transfer_params")
	o.TraceHeaders = raw("trace_headers")
	o.PrefillStats = raw("prefill_stats")
	o.RoutedExperts = arrayFromNode(t, n.must(t, "routed_experts"))
	o.NumNaNsInLogits = nodeInt(t, n.must(t, "num_nans_in_logits"))
	return o
}

func logprobsFromNode(t *testing.T, n node, ranks string) Logprobs {
	t.Helper()
	if n.kind == 'n' {
		return Logprobs{}
	}
	l := Logprobs{Present: true, Fields: 4}
	l.TokenIDs = arrayFromNode(t, n.must(t, "logprob_token_ids"))
	l.Logprobs = arrayFromNode(t, n.must(t, "logprobs"))
	l.SampledRanks = arrayFromNode(t, n.must(t, ranks))
	if cu := n.must(t, "cu_num_generated_tokens"); cu.kind != 'n' {
		l.HasCuNumGenerated = true
		for _, x := range cu.arr {
			l.CuNumGenerated = append(l.CuNumGenerated, nodeInt(t, x))
		}
	}
	return l
}

func arrayFromNode(t *testing.T, n node) Array {
	t.Helper()
	if n.kind == 'n' {
		return Array{}
	}
	name := n.must(t, "dtype").str
	dt, torch, ok := parseDType([]byte(name))
	if !ok {
		t.Fatalf("values: dtype %q unknown", name)
	}
	a := Array{DType: dt, Torch: torch, Shape: []int{}}
	for _, d := range n.must(t, "shape").arr {
		a.Shape = append(a.Shape, int(nodeInt(t, d)))
	}
	var data []byte
	for _, x := range n.must(t, "data").arr {
		data = appendElem(t, data, dt, normFloat(x))
	}
	if data == nil {
		data = []byte{}
	}
	a.Data = data
	return a
}

func appendElem(t *testing.T, b []byte, dt DType, x node) []byte {
	t.Helper()
	var f float64
	if dt.isFloat() {
		f = nodeFloat(t, x)
	}
	switch dt {
	case dtBool, dtInt8, dtUint8:
		return append(b, byte(nodeInt(t, x)))
	case dtInt16, dtUint16:
		return binary.LittleEndian.AppendUint16(b, uint16(nodeInt(t, x)))
	case dtInt32, dtUint32:
		return binary.LittleEndian.AppendUint32(b, uint32(nodeInt(t, x)))
	case dtInt64, dtUint64:
		return binary.LittleEndian.AppendUint64(b, uint64(nodeInt(t, x)))
	case dtFloat16:
		h := toHalf(f)
		if half(h) != f && !math.IsNaN(f) {
			t.Fatalf("float16 value %v is not exact", f)
		}
		return binary.LittleEndian.AppendUint16(b, h)
	case dtBFloat16:
		bits := math.Float32bits(float32(f))
		if float64(math.Float32frombits(bits&0xffff0000)) != f && !math.IsNaN(f) {
			t.Fatalf("bfloat16 value %v is not exact", f)
		}
		return binary.LittleEndian.AppendUint16(b, uint16(bits>>16))
	case dtFloat32:
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f)))
	case dtFloat64:
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	t.Fatalf("dtype %v", dt)
	return nil
}

// toHalf converts an exactly representable value to IEEE binary16 bits.
func toHalf(f float64) uint16 {
	var sign uint16
	if math.Signbit(f) {
		sign, f = 0x8000, -f
	}
	switch {
	case math.IsNaN(f):
		return 0x7e00
	case math.IsInf(f, 0):
		return sign | 0x7c00
	case f == 0:
		return sign
	}
	for e := 30; e >= 1; e-- { // normal numbers
		m := f/math.Ldexp(1, e-15) - 1
		if m >= 0 && m < 1 {
			return sign | uint16(e)<<10 | uint16(math.Round(m*1024))
		}
	}
	return sign | uint16(math.Round(f/math.Ldexp(1, -24))) // subnormal
}

func nodeInt(t *testing.T, n node) int64 {
	t.Helper()
	if n.kind != 'i' && n.kind != 's' {
		t.Fatalf("values: want an int, got %s", show(n))
	}
	s := n.num
	if n.kind == 's' {
		s = n.str
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		u, err2 := strconv.ParseUint(s, 10, 64)
		mustOK(t, err2)
		return int64(u)
	}
	return v
}

func nodeFloat(t *testing.T, n node) float64 {
	t.Helper()
	switch n.kind {
	case 'f':
		switch n.num {
		case "NaN":
			return math.NaN()
		case "+Inf":
			return math.Inf(1)
		case "-Inf":
			return math.Inf(-1)
		}
		f, err := strconv.ParseFloat(n.num, 64)
		mustOK(t, err)
		return f
	case 'i':
		return float64(nodeInt(t, n))
	}
	t.Fatalf("values: want a float, got %s", show(n))
	return 0
}

// appendNode writes a values node as msgspec writes the Python object it
// renders: dicts as maps in key order, bytes ({"hex"}) as bin, ints with
// the smallest encoding, floats as float64.
func appendNode(t *testing.T, b []byte, n node) []byte {
	t.Helper()
	switch n.kind {
	case 'n':
		return msgp.AppendNil(b)
	case 'b':
		return msgp.AppendBool(b, n.b)
	case 'i':
		return appendInt(b, nodeInt(t, n))
	case 'f':
		return msgp.AppendFloat64(b, nodeFloat(t, n))
	case 's':
		return msgp.AppendString(b, n.str)
	case 'a':
		b = msgp.AppendArrayHeader(b, uint32(len(n.arr)))
		for _, c := range n.arr {
			b = appendNode(t, b, c)
		}
		return b
	case 'o':
		if n.isHex {
			h, err := hex.DecodeString(n.vals[0].str)
			mustOK(t, err)
			return msgp.AppendBytes(b, h)
		}
		b = msgp.AppendMapHeader(b, uint32(len(n.keys)))
		for i, k := range n.keys {
			b = msgp.AppendString(b, k)
			b = appendNode(t, b, n.vals[i])
		}
		return b
	}
	t.Fatalf("appendNode: kind %c", n.kind)
	return nil
}

// TestGoldenSpecialCallIDs: the elastic-EP notifications (call id -1) and
// fault-tolerance status pushes (call id -2) vLLM sends decode to their
// typed values.
func TestGoldenSpecialCallIDs(t *testing.T) {
	want := map[string]any{
		"eo-eep-reconfigure-finished": EEPNotification{Type: eepReconfigureFinished, DPRank: 1},
		"eo-eep-shutdown-complete":    EEPNotification{Type: eepShutdownComplete, DPRank: 1},
		"eo-ft-status-unhealthy":      FTStatus{Engine: 0, Status: "unhealthy", HasFaultInfo: true, FaultInfo: "RuntimeError"},
		"eo-ft-status-healthy":        FTStatus{Engine: 0, Status: "healthy"},
		"eo-utility-result-dict":      nil,
	}
	seen := 0
	for _, v := range golden.Load(t, "engine-outputs") {
		w, ok := want[v.ID]
		if !ok {
			continue
		}
		seen++
		frames, err := v.Frames()
		mustOK(t, err)
		var m Message
		if err := Decode(frames, &m, nil); err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		got, ok, err := m.Utility.SpecialValue()
		if err != nil || got != w || ok != (w != nil) {
			t.Errorf("%s: SpecialValue = %#v, %v, %v; want %#v", v.ID, got, ok, err, w)
		}
		if w == nil && (m.Utility.Special != 0 || m.Utility.CallID != 1967554867335598546) {
			t.Errorf("%s: call id %d / special %d", v.ID, m.Utility.CallID, m.Utility.Special)
		}
	}
	if seen != len(want) {
		t.Fatalf("found %d of the %d vectors", seen, len(want))
	}
}

func TestSpecialValueRefusesWrongShapes(t *testing.T) {
	for _, tc := range []struct {
		special int64
		result  string
	}{
		{callIDEEPNotification, "\x91\xa1x"},               // one element
		{callIDEEPNotification, "\x92\x01\x01"},            // type not a str
		{callIDEEPNotification, "\x92\xa1x\xff"},           // negative rank
		{callIDFTStatus, "\x81\xa2id\x00"},                 // no status
		{callIDFTStatus, "\x82\xa2id\xa1x\xa6status\xa1y"}, // id not an int
		{callIDFTStatus, "\x92\x00\x00"},                   // not a map
	} {
		u := UtilityOutput{Special: tc.special, HasResult: true, Result: []byte(tc.result)}
		if v, ok, err := u.SpecialValue(); ok || err == nil {
			t.Errorf("%d %x: accepted %#v", tc.special, tc.result, v)
		}
	}
	u := UtilityOutput{Special: -3, HasResult: true, Result: []byte{0xc0}}
	if v, ok, err := u.SpecialValue(); ok || err != nil || v != nil {
		t.Errorf("unknown call id -3: %v %v %v", v, ok, err)
	}
}
