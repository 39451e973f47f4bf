// Package golden loads the vLLM golden wire vectors: byte vectors written by
// vLLM's own code (its KV-event publisher, engine-core encoder, coordinator,
// NIXL handshake and block hashing) and by SGLang's (its KV-event publisher),
// with the values they decode to. They are test data of this repository,
// under testdata/vllm and testdata/sglang beside this file, each folder with
// a README giving the engine's commit and how the bytes were made; a clone
// runs every test that reads them.
package golden

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Vector is one golden vector (one line of a .jsonl file).
type Vector struct {
	// ID is the vector's stable name.
	ID string `json:"id"`
	// Stream is kv-events, engine-outputs, coordinator, nixl or hashing.
	Stream string `json:"stream"`
	// Commit is the vLLM commit whose code made the bytes.
	Commit string `json:"vllm_commit"`
	// SGLangCommit is the SGLang commit whose code made the bytes (SGLang
	// vectors only).
	SGLangCommit string `json:"sglang_commit"`
	// Description says what the message is.
	Description string `json:"description"`
	// HexFrames are the ZeroMQ frames in order, as lowercase hex.
	HexFrames []string `json:"frames"`
	// Values is what a decoder must yield, rendered as the README of the
	// vectors describes (kept raw: each test decodes the part it needs).
	Values json.RawMessage `json:"values"`
	// ByteExact reports that the frames are exactly what vLLM's encoder
	// writes for Values.
	ByteExact bool `json:"byte_exact"`
	// Notes say which vLLM code made the message.
	Notes string `json:"notes"`
}

// Frames returns the hex-decoded frames.
func (v Vector) Frames() ([][]byte, error) {
	out := make([][]byte, len(v.HexFrames))
	for i, h := range v.HexFrames {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("golden: vector %s frame %d: %v", v.ID, i, err)
		}
		out[i] = b
	}
	return out, nil
}

// Message returns values.message (or values.kind for hashing vectors).
func (v Vector) Message() string {
	var m struct {
		Message string `json:"message"`
		Kind    string `json:"kind"`
	}
	_ = json.Unmarshal(v.Values, &m)
	if m.Message != "" {
		return m.Message
	}
	return m.Kind
}

// Dir returns the directory holding the vLLM vectors:
// internal/testkit/golden/testdata/vllm in this repository (its README says which
// vLLM commit made them and how).
func Dir() string { return filepath.Join(here(), "testdata", "vllm") }

// SGLangDir returns the directory holding the SGLang vectors:
// internal/testkit/golden/testdata/sglang (its README gives SGLang's commit and the
// method).
func SGLangDir() string { return filepath.Join(here(), "testdata", "sglang") }

// here is the directory of this source file: the vectors are found from the
// package's own place in the module, whatever directory a test runs in.
func here() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Dir(file)
}

// Load reads every vector of one vLLM stream file ("kv-events",
// "engine-outputs", "coordinator", "nixl", "hashing"). The vectors are part
// of the repository: a missing or empty file fails the test, never skips it.
func Load(t testing.TB, stream string) []Vector {
	t.Helper()
	return load(t, Dir(), stream)
}

// LoadSGLang reads every vector of one SGLang stream file ("kv-events").
func LoadSGLang(t testing.TB, stream string) []Vector {
	t.Helper()
	return load(t, SGLangDir(), stream)
}

func load(t testing.TB, dir, stream string) []Vector {
	t.Helper()
	vs, err := ReadFile(filepath.Join(dir, stream+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatalf("golden: %s/%s.jsonl holds no vectors", dir, stream)
	}
	return vs
}

// ReadFile parses one .jsonl file of vectors.
func ReadFile(path string) ([]Vector, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("golden: %v", err)
	}
	defer f.Close()
	var out []Vector
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var v Vector
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("golden: %s line %d: %v", path, n, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("golden: %s: %v", path, err)
	}
	return out, nil
}
