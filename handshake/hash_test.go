package handshake

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestPyFloatRepr(t *testing.T) {
	// Expected strings are Python 3's repr of the same double.
	cases := []struct {
		f    float64
		want string
	}{
		{0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {1, "1.0"}, {-1, "-1.0"}, {0.1, "0.1"}, {1.5, "1.5"},
		{100, "100.0"}, {1e-05, "1e-05"}, {0.0001, "0.0001"}, {0.00012, "0.00012"}, {1.2e-05, "1.2e-05"},
		{1e15, "1000000000000000.0"}, {1e16, "1e+16"}, {1.5e16, "1.5e+16"}, {9999999999999998, "9999999999999998.0"},
		{123456789.125, "123456789.125"}, {1e22, "1e+22"}, {1e100, "1e+100"}, {5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"}, {2.5e-7, "2.5e-07"}, {1.0 / 3, "0.3333333333333333"},
		{12345.678, "12345.678"}, {math.NaN(), "NaN"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
		{float64(float32(0.1)), "0.10000000149011612"},
	}
	for _, c := range cases {
		if got := string(appendPyFloat(nil, c.f)); got != c.want {
			t.Errorf("appendPyFloat(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestPythonJSONStatic(t *testing.T) {
	got, err := PythonJSON(map[string]any{
		"b": []any{1, 2.0, "x", nil, true, false},
		"a": map[string]int{"z": 1, "y": -2},
		"é": "naïve 🚀 \"q\" \\ \n\t\x00\x7f\u2028",
		"n": (*int)(nil),
		"e": []int{},
		"m": map[string]any{},
		"s": []string(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a": {"y": -2, "z": 1}, "b": [1, 2.0, "x", null, true, false], "e": [], "m": {}, "n": null, "s": null, ` +
		`"\u00e9": "na\u00efve \ud83d\ude80 \"q\" \\ \n\t\u0000\u007f\u2028"}`
	if string(got) != want {
		t.Fatalf("PythonJSON:\n got %s\nwant %s", got, want)
	}

	for name, v := range map[string]any{
		"invalid utf-8 value": map[string]any{"a": "\xff"},
		"invalid utf-8 key":   map[string]any{"\xff": 1},
		"bytes":               []byte("x"),
		"int keys":            map[int]int{1: 1},
		"struct":              struct{}{},
		"chan":                make(chan int),
		"func":                func() {},
		"complex":             complex(1, 2),
	} {
		if _, err := PythonJSON(v); err == nil {
			t.Errorf("%s: no error", name)
		}
		if name == "invalid utf-8 value" {
			if _, err := CompatibilityHash(v.(map[string]any)); err == nil {
				t.Error("CompatibilityHash accepted invalid UTF-8")
			}
		}
	}
	// Deep nesting is refused rather than recursing without bound.
	var deep any = 1
	for range 200 {
		deep = []any{deep}
	}
	if _, err := PythonJSON(deep); err == nil {
		t.Error("200 levels accepted")
	}
	var ok any = 1
	for range 50 {
		ok = []any{ok}
	}
	if _, err := PythonJSON(ok); err != nil {
		t.Errorf("50 levels: %v", err)
	}
}

// exampleFactors is a realistic factor set; pyExampleFactors builds the
// same dict the way compute_nixl_compatibility_hash does.
func exampleFactors() Factors {
	return Factors{
		VLLMVersion:      "0.11.1",
		ConnectorVersion: ConnectorVersion,
		Model:            "meta-llama/Llama-3.1-8B-Instruct",
		Dtype:            "torch.bfloat16",
		NumKVHeads:       8,
		HeadSize:         128,
		NumHiddenLayers:  32,
		AttnBackendName:  "FLASH_ATTN",
		CacheDtype:       "auto",
		IsHMAEnabled:     true,
		TransferMode:     "pull",
	}
}

const pyExampleFactors = `{
  "vllm_version": "0.11.1",
  "nixl_connector_version": 12,
  "model": "meta-llama/Llama-3.1-8B-Instruct",
  "dtype": "torch.bfloat16",
  "num_kv_heads": 8,
  "head_size": 128,
  "num_hidden_layers": 32,
  "attn_backend_name": "FLASH_ATTN",
  "cache_dtype": "auto",
  "is_hma_enabled": True,
  "speculative_config": None,
  "transfer_mode": "pull",
}`

// TestCompatibilityHashPython checks CompatibilityHash and PythonJSON
// against Python's json.dumps(sort_keys=True) and hashlib.sha256, run live.
func TestCompatibilityHashPython(t *testing.T) {
	requirePython(t, "json, hashlib")
	spec := exampleFactors()
	spec.TransferMode = "push"
	spec.Model = "/models/Qwen3-30B-A3B ünïcödé 模型 🚀"
	spec.Extra = map[string]any{"cross_layers_blocks": false}
	spec.SpeculativeConfig = map[string]any{
		"method":              "eagle3",
		"model":               "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
		"revision":            nil,
		"code_revision":       nil,
		"parallel_drafting":   false,
		"kv_cache_dtype":      "fp8_e4m3",
		"auxiliary_layer_ids": []int{2, 15, 29},
	}
	cases := []struct {
		name string
		goV  map[string]any
		py   string
	}{
		{"factors", func() map[string]any { f := exampleFactors(); return f.Map() }(), pyExampleFactors},
		{"speculative", spec.Map(), `{
  "vllm_version": "0.11.1", "nixl_connector_version": 12,
  "model": "/models/Qwen3-30B-A3B \u00fcn\u00efc\u00f6d\u00e9 \u6a21\u578b \U0001F680",
  "dtype": "torch.bfloat16", "num_kv_heads": 8, "head_size": 128, "num_hidden_layers": 32,
  "attn_backend_name": "FLASH_ATTN", "cache_dtype": "auto", "is_hma_enabled": True,
  "speculative_config": {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "revision": None, "code_revision": None, "parallel_drafting": False,
    "kv_cache_dtype": "fp8_e4m3", "auxiliary_layer_ids": (2, 15, 29)},
  "transfer_mode": "push", "cross_layers_blocks": False,
}`},
		{"floats", map[string]any{
			"f": []float64{0, math.Copysign(0, -1), 1, 0.1, 1e-05, 0.0001, 1e15, 1e16, 1.5e16, 1e22, 5e-324,
				math.MaxFloat64, 1.0 / 3, 12345.678, 2.5e-07, 100},
			"special": []any{math.NaN(), math.Inf(1), math.Inf(-1)},
			"f32":     float32(0.1),
		}, `{
  "f": [0.0, -0.0, 1.0, 0.1, 1e-05, 0.0001, 1e15, 1e16, 1.5e16, 1e22, 5e-324,
        1.7976931348623157e308, 1/3, 12345.678, 2.5e-07, 100.0],
  "special": [float("nan"), float("inf"), float("-inf")],
  "f32": 0.10000000149011612,
}`},
		{"strings and keys", map[string]any{
			"Z": 1, "a": 2, "_": 3, "10": 4, "9": 5, "é": 6, "ß": 7, "🚀": 8, "\uffff": 9, "\U00010000": 10, "": 11,
			"esc":   "\"\\/\b\f\n\r\t\x00\x01\x1f\x7f\u0080\u00ff\u2028\u2029\ud7ff\ue000\U0010ffff",
			"emoji": "👩‍👩‍👧 🇫🇷 🚀",
		}, `{
  "Z": 1, "a": 2, "_": 3, "10": 4, "9": 5, "\u00e9": 6, "\u00df": 7, "\U0001F680": 8, "\uffff": 9,
  "\U00010000": 10, "": 11,
  "esc": "\"\\/\b\f\n\r\t\x00\x01\x1f\x7f\u0080\u00ff\u2028\u2029\ud7ff\ue000\U0010ffff",
  "emoji": "\U0001F469\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7 \U0001F680",
}`},
		{"nested and ints", map[string]any{
			"nested": map[string]any{"b": []any{map[string]any{"y": nil, "x": []any{}}, true}, "a": map[string]any{}},
			"ints":   []any{0, -1, math.MaxInt64, math.MinInt64, uint64(math.MaxUint64), int8(-8), uint16(65535)},
			"none":   nil,
			"bools":  []bool{true, false},
		}, `{
  "nested": {"b": [{"y": None, "x": []}, True], "a": {}},
  "ints": [0, -1, 2**63 - 1, -2**63, 2**64 - 1, -8, 65535],
  "none": None,
  "bools": [True, False],
}`},
		{"empty", map[string]any{}, `{}`},
	}

	var script strings.Builder
	script.WriteString("import json, hashlib, sys\ncases = [\n")
	for _, c := range cases {
		script.WriteString(c.py + ",\n")
	}
	script.WriteString("]\nfor c in cases:\n    s = json.dumps(c, sort_keys=True)\n" +
		"    print(hashlib.sha256(s.encode()).hexdigest() + ' ' + s)\n")
	out := runPython(t, script.String(), nil)
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("python printed %d lines for %d cases:\n%s", len(lines), len(cases), out)
	}
	for i, c := range cases {
		pyHash, pyJSON, _ := strings.Cut(lines[i], " ")
		goJSON, err := PythonJSON(c.goV)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(goJSON) != pyJSON {
			t.Errorf("%s: JSON differs\n  go %s\n  py %s", c.name, goJSON, pyJSON)
		}
		h, err := CompatibilityHash(c.goV)
		if err != nil || h != pyHash {
			t.Errorf("%s: hash %s (%v), python %s", c.name, h, err, pyHash)
		}
	}
	f := exampleFactors()
	if h, err := f.Hash(); err != nil || h != strings.Fields(lines[0])[0] {
		t.Errorf("Factors.Hash = %s, %v", h, err)
	}
}

// TestPyFloatReprPython compares appendPyFloat with Python's repr on
// thousands of doubles: random bit patterns, random values around the
// notation thresholds, and integers.
func TestPyFloatReprPython(t *testing.T) {
	requirePython(t, "json, struct")
	r := rand.New(rand.NewPCG(1, 2))
	var vals []float64
	for range 3000 {
		vals = append(vals, math.Float64frombits(r.Uint64()))
	}
	for e := -8; e <= 20; e++ {
		for range 40 {
			m := r.Float64()*9 + 1
			vals = append(vals, m*math.Pow(10, float64(e)), -m*math.Pow(10, float64(e)))
		}
		vals = append(vals, math.Pow(10, float64(e)), math.Nextafter(math.Pow(10, float64(e)), 0),
			math.Nextafter(math.Pow(10, float64(e)), math.Inf(1)))
	}
	for range 500 {
		vals = append(vals, float64(r.Int64N(1<<60)), float64(float32(r.Float64())))
	}
	var in bytes.Buffer
	for _, v := range vals {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], math.Float64bits(v))
		in.WriteString(hex.EncodeToString(b[:]) + "\n")
	}
	out := runPython(t, `import json, struct, sys
for line in sys.stdin:
    print(json.dumps(struct.unpack(">d", bytes.fromhex(line.strip()))[0]))
`, in.Bytes())
	sc := bufio.NewScanner(bytes.NewReader(out))
	i, bad := 0, 0
	for sc.Scan() {
		if i >= len(vals) {
			t.Fatal("python printed too many lines")
		}
		got := string(appendPyFloat(nil, vals[i]))
		if got != sc.Text() && bad < 20 {
			bad++
			t.Errorf("%s: go %s, python %s", strconv.FormatFloat(vals[i], 'g', -1, 64), got, sc.Text())
		}
		i++
	}
	if i != len(vals) {
		t.Fatalf("python printed %d of %d lines", i, len(vals))
	}
}

func BenchmarkCompatibilityHash(b *testing.B) {
	f := exampleFactors()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Hash(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFactorsKeys(t *testing.T) {
	f := exampleFactors()
	m := f.Map()
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"attn_backend_name", "cache_dtype", "dtype", "head_size", "is_hma_enabled", "model",
		"nixl_connector_version", "num_hidden_layers", "num_kv_heads", "speculative_config", "transfer_mode", "vllm_version"}
	if !slices.Equal(keys, want) {
		t.Fatalf("Factors.Map keys %v, want %v", keys, want)
	}
	if m["speculative_config"] != nil {
		t.Fatalf("nil SpeculativeConfig maps to %#v, want untyped nil", m["speculative_config"])
	}
	f.Extra = map[string]any{"transfer_mode": "push", "cross_layers_blocks": true}
	m = f.Map()
	if len(m) != 13 || m["transfer_mode"] != "push" || m["cross_layers_blocks"] != true {
		t.Fatalf("Extra not merged: %v", m)
	}
}
