package handshake

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/vllm"
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
		if got := pyFloat(c.f); got != c.want {
			t.Errorf("appendPyFloat(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestPythonJSONStatic(t *testing.T) {
	got, err := nixlwire.PythonJSON(map[string]any{
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
		if _, err := nixlwire.PythonJSON(v); err == nil {
			t.Errorf("%s: no error", name)
		}
		if name == "invalid utf-8 value" {
			if _, err := nixlwire.CompatibilityHash(v.(map[string]any)); err == nil {
				t.Error("CompatibilityHash accepted invalid UTF-8")
			}
		}
	}
	// Deep nesting is refused rather than recursing without bound.
	var deep any = 1
	for range 200 {
		deep = []any{deep}
	}
	if _, err := nixlwire.PythonJSON(deep); err == nil {
		t.Error("200 levels accepted")
	}
	var ok any = 1
	for range 50 {
		ok = []any{ok}
	}
	if _, err := nixlwire.PythonJSON(ok); err != nil {
		t.Errorf("50 levels: %v", err)
	}
}

// exampleFactors is a realistic factor set; pyExampleFactors builds the
// same dict the way compute_nixl_compatibility_hash does.
func exampleFactors() Factors {
	return Factors{
		VLLMVersion:     "0.11.1",
		Model:           "meta-llama/Llama-3.1-8B-Instruct",
		Dtype:           "torch.bfloat16",
		NumKVHeads:      8,
		HeadSize:        128,
		NumHiddenLayers: 32,
		AttnBackendName: "FLASH_ATTN",
		CacheDtype:      "auto",
		IsHMAEnabled:    true,
		TransferMode:    "pull",
	}
}

const pyExampleFactors = `{
  "vllm_version": "0.11.1",
  "nixl_connector_version": 7,
  "model": "meta-llama/Llama-3.1-8B-Instruct",
  "dtype": "torch.bfloat16",
  "num_kv_heads": 8,
  "head_size": 128,
  "num_hidden_layers": 32,
  "attn_backend_name": "FLASH_ATTN",
  "cache_dtype": "auto",
  "cross_layers_blocks": False,
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
		{"factors", func() map[string]any { f := exampleFactors(); return f.dict() }(), pyExampleFactors},
		{"speculative", spec.dict(), `{
  "vllm_version": "0.11.1", "nixl_connector_version": 7,
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
		goJSON, err := nixlwire.PythonJSON(c.goV)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(goJSON) != pyJSON {
			t.Errorf("%s: JSON differs\n  go %s\n  py %s", c.name, goJSON, pyJSON)
		}
		h, err := nixlwire.CompatibilityHash(c.goV)
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
		got := pyFloat(vals[i])
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
	m := f.dict()
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"attn_backend_name", "cache_dtype", "cross_layers_blocks", "dtype", "head_size", "is_hma_enabled",
		"model", "nixl_connector_version", "num_hidden_layers", "num_kv_heads", "speculative_config", "transfer_mode",
		"vllm_version"}
	if !slices.Equal(keys, want) {
		t.Fatalf("Factors.Map keys %v, want %v", keys, want)
	}
	if m["speculative_config"] != nil {
		t.Fatalf("nil SpeculativeConfig maps to %#v, want untyped nil", m["speculative_config"])
	}
	f.Extra = map[string]any{"transfer_mode": "push", "cross_layers_blocks": true, "x": 1}
	m = f.dict()
	if len(m) != 14 || m["transfer_mode"] != "push" || m["cross_layers_blocks"] != true {
		t.Fatalf("Extra not merged: %v", m)
	}
	// Every release hashes exactly its own keys and connector version.
	for _, r := range vllm.Releases() {
		f := exampleFactors()
		f.Release = r
		m := f.dict()
		keys = keys[:0]
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := nixlFactorKeys(r.Rules()); !slices.Equal(keys, want) {
			t.Errorf("%s: keys %v, want %v", r, keys, want)
		}
		if m["nixl_connector_version"] != r.Rules().NixlConnectorVersion {
			t.Errorf("%s: connector version %v", r, m["nixl_connector_version"])
		}
	}
	// An explicit ConnectorVersion wins; an empty TransferMode is pull.
	f = exampleFactors()
	f.ConnectorVersion, f.TransferMode = 6, ""
	if m := f.dict(); m["nixl_connector_version"] != 6 || m["transfer_mode"] != "pull" {
		t.Fatalf("explicit version / default mode: %v", m)
	}
}

// pyReleaseHash reads lines "PROFILE JSON-CONFIG" on stdin and prints, for
// each, the compatibility hash as that release's Python computes it: one
// function per profile builds the dict as its compute_nixl_compatibility_hash
// does (with its NIXL_CONNECTOR_VERSION literal), then hash_factors (sha256
// of json.dumps(sort_keys=True)).
const pyReleaseHash = `import json, hashlib, sys
def base(c, version):
    return {
        "vllm_version": c["vllm_version"],
        "nixl_connector_version": version,
        "model": c["model"],
        "dtype": c["dtype"],
        "num_kv_heads": c["num_kv_heads"],
        "head_size": c["head_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "attn_backend_name": c["attn_backend_name"],
        "cache_dtype": c["cache_dtype"],
        "cross_layers_blocks": c["cross_layers_blocks"],
        "is_hma_enabled": c["is_hma_enabled"],
    }
def spec(c):
    s = c["speculative_config"]
    if s is None:
        return None
    s = dict(s)
    s["auxiliary_layer_ids"] = tuple(s["auxiliary_layer_ids"]) if s["auxiliary_layer_ids"] is not None else None
    return s
def v6(c):  # vLLM PR #49230 (speculative_config, version 6)
    f = base(c, 6)
    f["speculative_config"] = spec(c)
    return f
def v7(c):  # vLLM PR #49230 (speculative_config) and #50620 (transfer_mode, version 7)
    f = base(c, 7)
    f["speculative_config"] = spec(c)
    f["transfer_mode"] = c["transfer_mode"] or "pull"
    return f
def v8(c):  # vLLM PR #55776 (open): the model's revision and code_revision, version 8
    f = v7(c)
    f["nixl_connector_version"] = 8
    f["revision"] = c.get("revision") or None
    f["code_revision"] = c.get("code_revision") or None
    return f
profiles = {"0.25": lambda c: base(c, 5), "0.26": lambda c: base(c, 5), "main-pre-50620": v6, "main-pre-51481": v7, "latest": v7,
    "latest,pr55776": v8, "main-pre-51481,pr55776": v8}
for line in sys.stdin:
    name, cfg = line.split(" ", 1)
    print(hashlib.sha256(json.dumps(profiles[name](json.loads(cfg)), sort_keys=True).encode()).hexdigest())
`

// writePyFactors writes f as a line for pyReleaseHash.
func writePyFactors(w *bytes.Buffer, r vllm.Release, f *Factors) {
	cfg, _ := json.Marshal(map[string]any{
		"vllm_version": f.VLLMVersion, "model": f.Model, "dtype": f.Dtype, "num_kv_heads": f.NumKVHeads,
		"head_size": f.HeadSize, "num_hidden_layers": f.NumHiddenLayers, "attn_backend_name": f.AttnBackendName,
		"cache_dtype": f.CacheDtype, "cross_layers_blocks": f.CrossLayersBlocks, "is_hma_enabled": f.IsHMAEnabled,
		"speculative_config": f.SpeculativeConfig, "transfer_mode": f.TransferMode,
		"revision": f.Revision, "code_revision": f.CodeRevision,
	})
	fmt.Fprintf(w, "%s %s\n", r, cfg)
}

// TestCompatibilityHashReleases computes, for every release profile and
// four factor sets, the hash the way that release's Python does: each
// profile's compute_nixl_compatibility_hash is mirrored in Python below
// (the dict it builds, with its NIXL_CONNECTOR_VERSION literal, then
// hash_factors: sha256 of json.dumps(sort_keys=True)), independently of the
// Go code under test.
func TestCompatibilityHashReleases(t *testing.T) {
	requirePython(t, "json, hashlib")
	spec := map[string]any{
		"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "revision": nil, "code_revision": nil,
		"parallel_drafting": false, "kv_cache_dtype": "auto", "auxiliary_layer_ids": []int{2, 15, 29},
	}
	sets := []Factors{
		exampleFactors(),
		{VLLMVersion: "0.26.0", Model: "Qwen/Qwen3-30B-A3B", Dtype: "torch.bfloat16", NumKVHeads: 4, HeadSize: 128,
			NumHiddenLayers: 48, AttnBackendName: "FLASHINFER", CacheDtype: "fp8_e4m3", CrossLayersBlocks: true,
			IsHMAEnabled: false, TransferMode: "push"},
		{VLLMVersion: "0.1.dev19795+g6d8600b52", Model: "/models/deepseek ünï 模型", Dtype: "torch.float16", NumKVHeads: 1,
			HeadSize: 576, NumHiddenLayers: 61, AttnBackendName: "FLASHMLA", CacheDtype: "auto", IsHMAEnabled: true,
			SpeculativeConfig: spec},
		{VLLMVersion: "0.25.1", Model: "m", Dtype: "torch.float32", NumKVHeads: 32, HeadSize: 64, NumHiddenLayers: 2,
			AttnBackendName: "TRITON_ATTN", CacheDtype: "auto", CrossLayersBlocks: true, TransferMode: "pull"},
	}
	var in bytes.Buffer
	var goHashes []string
	for _, r := range vllm.Releases() {
		for _, f := range sets {
			writePyFactors(&in, r, &f)
			f.Release = r
			h, err := f.Hash()
			if err != nil {
				t.Fatal(err)
			}
			goHashes = append(goHashes, h)
		}
	}
	lines := strings.Fields(string(runPython(t, pyReleaseHash, in.Bytes())))
	if len(lines) != len(goHashes) {
		t.Fatalf("python printed %d hashes for %d cases", len(lines), len(goHashes))
	}
	seen := map[string]bool{}
	for i, h := range goHashes {
		if h != lines[i] {
			t.Errorf("%s, factor set %d: go %s, python %s", vllm.Releases()[i/len(sets)], i%len(sets), h, lines[i])
		}
		seen[h] = true
	}
	// 0.25 and 0.26 hash alike, as do main-pre-51481 and latest; the three
	// rule sets and the four factor sets give twelve distinct hashes.
	if want := 3 * len(sets); len(seen) != want {
		t.Errorf("%d distinct hashes, want %d", len(seen), want)
	}
}

// TestCompatibilityHashModelRevision: with the option ",pr55776" (vLLM PR
// #55776, open) the hash adds revision and code_revision (None when empty)
// at connector version 8, as the PR's description says, mirrored in Python
// as for the releases; without the option the revisions are not hashed.
func TestCompatibilityHashModelRevision(t *testing.T) {
	requirePython(t, "json, hashlib")
	sets := []Factors{exampleFactors(), exampleFactors(), exampleFactors()}
	sets[1].Revision = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
	sets[2].Revision, sets[2].CodeRevision = "main", "v2.1"
	var in bytes.Buffer
	var goHashes []string
	for _, name := range []string{"latest,pr55776", "main-pre-51481,pr55776"} {
		r := vllm.MustParse(name)
		for _, f := range sets {
			writePyFactors(&in, r, &f)
			f.Release = r
			h, err := f.Hash()
			if err != nil {
				t.Fatal(err)
			}
			goHashes = append(goHashes, h)
		}
	}
	lines := strings.Fields(string(runPython(t, pyReleaseHash, in.Bytes())))
	if len(lines) != len(goHashes) {
		t.Fatalf("python printed %d hashes for %d cases", len(lines), len(goHashes))
	}
	for i, h := range goHashes {
		if h != lines[i] {
			t.Errorf("case %d: go %s, python %s", i, h, lines[i])
		}
	}
	if goHashes[0] == goHashes[1] || goHashes[1] == goHashes[2] {
		t.Error("a different revision gives the same hash")
	}
	plain, rev := exampleFactors(), exampleFactors()
	rev.Revision = "a1b2c3d4"
	h1, _ := plain.Hash()
	h2, _ := rev.Hash()
	if h1 != h2 {
		t.Error("latest without the option hashes the revision")
	}
	keys := nixlFactorKeys(vllm.MustParse("latest,pr55776").Rules())
	if !slices.Contains(keys, "revision") || !slices.Contains(keys, "code_revision") || !slices.IsSorted(keys) {
		t.Fatalf("keys %v", keys)
	}
	f := exampleFactors()
	f.Release = vllm.MustParse("latest,pr55776")
	if m := f.dict(); m["nixl_connector_version"] != 8 || m["revision"] != nil || len(m) != len(keys) {
		t.Fatalf("dict %v", m)
	}
}

func TestNixlFactorKeys(t *testing.T) {
	latest := nixlFactorKeys(vllm.Latest().Rules())
	want := []string{"attn_backend_name", "cache_dtype", "cross_layers_blocks", "dtype", "head_size", "is_hma_enabled",
		"model", "nixl_connector_version", "num_hidden_layers", "num_kv_heads", "speculative_config", "transfer_mode",
		"vllm_version"}
	if !slices.Equal(latest, want) {
		t.Fatalf("latest keys %v", latest)
	}
	old := nixlFactorKeys(vllm.Releases()[0].Rules())
	if len(old) != 11 || slices.Contains(old, "transfer_mode") || slices.Contains(old, "speculative_config") ||
		!slices.Contains(old, "cross_layers_blocks") {
		t.Fatalf("0.25 keys %v", old)
	}
	for _, r := range vllm.Releases() {
		if k := nixlFactorKeys(r.Rules()); !slices.IsSorted(k) {
			t.Errorf("%s: keys not sorted: %v", r, k)
		}
	}
}

// pyFloat renders f as Python's json.dumps does (its float repr).
func pyFloat(f float64) string {
	b, err := nixlwire.PythonJSON(f)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}
