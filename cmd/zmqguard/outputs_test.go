package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func f32le(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func i32le(v ...int32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func outputLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func asJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOutputs pushes junk, a message with logprobs in aux frames, a pooling
// output, ENGINE_CORE_DEAD and one more output to `zmqguard outputs
// --count 3`: one JSON line per output, the engine_dead line, the counters
// last, exit 0.
func TestOutputs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "outputs", "--bind", "tcp://127.0.0.1:0", "--count", "3", "--log-format", "json")
	ep := p.logField("outputs receiving", "endpoint", 20*time.Second)
	push, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.Dial(ep)
	ids := make([]int32, 2*33)
	lps := make([]float32, 2*33)
	for i := range ids {
		ids[i], lps[i] = int32(i), -float32(i)/4
	}
	var enc enginecore.Encoder
	msgs := []*enginecore.Message{
		{Header: enginecore.Header{EngineIndex: 1, Timestamp: 1},
			Outputs: []enginecore.Output{{
				RequestID: []byte("req-1"), NewTokenIDs: []int64{7, 8},
				NewLogprobs: enginecore.Logprobs{Present: true, Fields: 4,
					TokenIDs:     enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{2, 33}, Data: i32le(ids...)},
					Logprobs:     enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{2, 33}, Data: f32le(lps...)},
					SampledRanks: enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{2}, Data: i32le(1, 2)}},
			}, {
				RequestID: []byte("req-2"), NewTokenIDs: []int64{9}, HasFinishReason: true, FinishReason: enginecore.FinishLength,
				StopReason: enginecore.StopReason{Kind: enginecore.StopStr, Str: []byte("\"end\"")},
			}}},
		{Header: enginecore.Header{EngineIndex: 1, Timestamp: 2},
			Outputs: []enginecore.Output{{
				RequestID:     []byte("emb"),
				PoolingOutput: enginecore.Array{DType: enginecore.DTypeOf("float32"), Torch: true, Shape: []int{2, 2}, Data: f32le(0.5, -1, 2, 0.25)},
			}}},
	}
	if err := push.Send(ctx, []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	if err := push.Send(ctx, enc.Encode(msgs[0])...); err != nil {
		t.Fatal(err)
	}
	if err := push.Send(ctx, []byte("ENGINE_CORE_DEAD")); err != nil {
		t.Fatal(err)
	}
	if err := push.Send(ctx, enc.Encode(msgs[1])...); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("outputs exit %d\nstdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	lines := outputLines(t, p.stdout.String())
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), p.stdout)
	}
	l0 := lines[0]
	wantIDs := asJSON(t, `[[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32],[33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65]]`)
	lp, _ := l0["new_logprobs"].(map[string]any)
	if l0["engine"] != 1.0 || l0["request_id"] != "req-1" || !reflect.DeepEqual(l0["new_token_ids"], asJSON(t, "[7,8]")) ||
		l0["finish_reason"] != nil || lp == nil || !reflect.DeepEqual(lp["logprob_token_ids"], wantIDs) ||
		!reflect.DeepEqual(lp["sampled_token_ranks"], asJSON(t, "[1,2]")) || l0["pooling_output"] != nil {
		t.Errorf("line 0: %v", l0)
	}
	if rows, _ := lp["logprobs"].([]any); len(rows) != 2 || rows[1].([]any)[32] != -65.0/4 {
		t.Errorf("logprobs: %v", lp["logprobs"])
	}
	if l1 := lines[1]; l1["request_id"] != "req-2" || l1["finish_reason"] != 1.0 || l1["stop_reason"] != `"end"` || l1["new_logprobs"] != nil {
		t.Errorf("line 1: %v", l1)
	}
	if l2 := lines[2]; l2["engine"] != 1.0 || l2["type"] != "engine_dead" {
		t.Errorf("line 2: %v", l2)
	}
	if l3 := lines[3]; !reflect.DeepEqual(l3["pooling_output"], asJSON(t, `{"dtype":"float32","shape":[2,2],"data":[[0.5,-1],[2,0.25]]}`)) {
		t.Errorf("line 3: %v", l3)
	}
	c, _ := lines[4]["counters"].(map[string]any)
	if c == nil || c["outputs"] != 3.0 || c["engine_dead"] != 1.0 || !reflect.DeepEqual(c["dropped"], asJSON(t, `{"decode":1}`)) {
		t.Fatalf("counters: %v", lines[4])
	}
	if eng, _ := c["engines"].([]any); len(eng) != 1 || eng[0].(map[string]any)["dead"] != true {
		t.Fatalf("engines: %v", c["engines"])
	}
}

// TestOutputsUntilSignal: with --count 0 it runs until SIGTERM, then prints
// the counters and exits 0.
func TestOutputsUntilSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "outputs", "--bind", "tcp://127.0.0.1:0", "--log-format", "json")
	p.logField("outputs receiving", "endpoint", 20*time.Second)
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
	if r := p.jsonLine(); r["counters"] == nil {
		t.Fatalf("no counters line: %s", p.stdout)
	}
}

// TestOutputsManyFrames: a message with 101 aux frames (over the socket
// package's default of 64) is printed in full.
func TestOutputsManyFrames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "outputs", "--bind", "tcp://127.0.0.1:0", "--count", "100", "--log-format", "json")
	ep := p.logField("outputs receiving", "endpoint", 20*time.Second)
	push, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.Dial(ep)
	m := &enginecore.Message{Header: enginecore.Header{Timestamp: 1}}
	for i := range 100 {
		m.Outputs = append(m.Outputs, enginecore.Output{RequestID: []byte{'r', byte('0' + i%10)}, NewTokenIDs: []int64{int64(i)},
			RoutedExperts: enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{1}, Data: i32le(int32(i))}})
	}
	enc := enginecore.Encoder{Threshold: 1}
	frames := enc.Encode(m)
	if len(frames) != 101 {
		t.Fatalf("%d frames", len(frames))
	}
	if err := push.Send(ctx, frames...); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
	lines := outputLines(t, p.stdout.String())
	if len(lines) != 101 || !reflect.DeepEqual(lines[99]["routed_experts"], asJSON(t, `{"dtype":"<i4","shape":[1],"data":[99]}`)) {
		t.Fatalf("%d lines; line 99: %v", len(lines), lines[min(99, len(lines)-1)])
	}
}

// TestOutputsRealSizeStep: by default `zmqguard outputs` takes one step of a
// large engine whole: 1365 outputs with logprobs and routed experts in 4095
// aux frames (4096 frames, about 2 MiB), over the receiver's old 1024-frame
// and 1 MiB limits.
func TestOutputsRealSizeStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "outputs", "--bind", "tcp://127.0.0.1:0", "--count", "1365", "--log-format", "json")
	ep := p.logField("outputs receiving", "endpoint", 20*time.Second)
	push, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.Dial(ep)
	m := &enginecore.Message{Header: enginecore.Header{Timestamp: 3}}
	arr := make([]byte, 512)
	for i := range 1365 {
		m.Outputs = append(m.Outputs, enginecore.Output{
			RequestID: []byte(fmt.Sprintf("cmpl-%d", i)), NewTokenIDs: []int64{int64(i)},
			NewLogprobs: enginecore.Logprobs{Present: true, Fields: 4,
				TokenIDs:     enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{1, 128}, Data: arr},
				Logprobs:     enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{1, 128}, Data: arr},
				SampledRanks: enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{1}, Data: arr[:4]}},
			RoutedExperts: enginecore.Array{DType: enginecore.DTypeOf("int16"), Shape: []int{32, 8}, Data: arr},
		})
	}
	var enc enginecore.Encoder
	frames := enc.Encode(m)
	size := 0
	for _, f := range frames {
		size += len(f)
	}
	if len(frames) != 4096 || size < 2<<20-64<<10 {
		t.Fatalf("%d frames, %d bytes", len(frames), size)
	}
	if err := push.Send(ctx, frames...); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("outputs exit %d\nstderr:\n%s", code, p.stderr)
	}
	if lines := outputLines(t, p.stdout.String()); len(lines) != 1366 || lines[1364]["request_id"] != "cmpl-1364" {
		t.Fatalf("%d lines", len(lines))
	}
}

// TestOutputsCurve (issue 29 row 4): `zmqguard outputs` serves CURVE with
// --curve-secret-key-file and --curve-allow. An engine with a listed key
// is heard; an engine with an unlisted key pair is refused by the
// authorizer before any of its messages counts, and a NULL peer cannot
// connect at all.
func TestOutputsCurve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srvPub, srvSecret, cliSecret, cliDir := curveCerts(t)
	p := start(t, ctx, "outputs", "--bind", "tcp://127.0.0.1:0", "--count", "1",
		"--curve-secret-key-file", srvSecret, "--curve-allow", cliDir, "--log-format", "json")
	ep := p.logField("outputs receiving", "endpoint", 20*time.Second)
	server, err := zmtpguard.ParseCurveKey(srvPub)
	if err != nil {
		t.Fatal(err)
	}
	var enc enginecore.Encoder
	msg := func(id string) [][]byte {
		return enc.Encode(&enginecore.Message{Header: enginecore.Header{EngineIndex: 0, Timestamp: 1},
			Outputs: []enginecore.Output{{RequestID: []byte(id), NewTokenIDs: []int64{1}}}})
	}

	// An unlisted key pair: the authorizer refuses it (the condition the
	// test waits for), so its message is never received.
	_, freshSecret, _ := zmtpguard.GenerateCurveKeyPair()
	o := quietSocket()
	o.Guard.Curve = &zmtpguard.CurveConfig{SecretKey: freshSecret, ServerKey: server}
	evil, err := socket.New("PUSH", o)
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Close()
	evil.Dial(ep)
	evilCtx, evilCancel := context.WithTimeout(ctx, 2*time.Second)
	_ = evil.Send(evilCtx, msg("forged")...) // no connection ever completes: the send times out
	evilCancel()
	p.waitStderr("refused by the authorizer", 20*time.Second)

	_, certSecret, err := zmtpguard.LoadCertificate(cliSecret)
	if err != nil {
		t.Fatal(err)
	}
	o = quietSocket()
	o.Guard.Curve = &zmtpguard.CurveConfig{SecretKey: certSecret, ServerKey: server}
	engine, err := socket.New("PUSH", o)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	engine.Dial(ep)
	if err := engine.Send(ctx, msg("honest")...); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("outputs exit %d\nstdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	lines := outputLines(t, p.stdout.String())
	if len(lines) != 2 || lines[0]["request_id"] != "honest" {
		t.Fatalf("stdout:\n%s", p.stdout)
	}
	c, _ := lines[1]["counters"].(map[string]any)
	if c == nil || c["received"] != 1.0 || c["outputs"] != 1.0 {
		t.Fatalf("counters: %v", lines[1])
	}
	for _, args := range [][]string{
		{"--curve-secret-key-file", srvSecret},
		{"--curve-allow", cliDir},
	} {
		if code, _, errOut := runBin(t, 20*time.Second, append([]string{"outputs", "--bind", "tcp://127.0.0.1:0"}, args...)...); code != 2 {
			t.Errorf("outputs %v: exit %d, want 2 (usage)\n%s", args, code, errOut)
		}
	}
}

// TestOutputsBindProtected (issue 37, "first is not owner"): outputs
// refuses to bind an address other than loopback without --allow or CURVE
// (exit 2, naming the remedies); --any-peer serves it anyway.
func TestOutputsBindProtected(t *testing.T) {
	code, _, errOut := runBin(t, 20*time.Second, "outputs", "--bind", "tcp://0.0.0.0:0")
	if code != 2 || !strings.Contains(errOut, "--any-peer") || !strings.Contains(errOut, "--allow") {
		t.Fatalf("outputs --bind tcp://0.0.0.0:0: exit %d, stderr %q", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "outputs", "--bind", "tcp://0.0.0.0:0", "--any-peer", "--log-format", "json")
	p.logField("outputs receiving", "endpoint", 20*time.Second)
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
}
