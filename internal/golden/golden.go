// Package golden loads the vLLM golden wire vectors: byte vectors written by
// vLLM's own code (its KV-event publisher, engine-core encoder, coordinator,
// NIXL handshake and block hashing), with the values they decode to. They
// live outside the repository, in ../shared/vllm-golden next to the module
// root (or in the directory named by $ZMQGUARD_GOLDEN_DIR).
//
// Tests that read them follow the project's rule for a missing peer: a loud
// skip in a plain clone, a failure under CI ($CI set).
package golden

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// Dir returns the directory holding the vectors, or "" when it cannot be
// found: $ZMQGUARD_GOLDEN_DIR, else ../shared/vllm-golden beside the module
// root (the directory holding go.mod, found by walking up from the working
// directory).
func Dir() string {
	if d := os.Getenv("ZMQGUARD_GOLDEN_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			// A nested module (bench/...) keeps walking to the main one.
			if modulePath(filepath.Join(d, "go.mod")) == "github.com/zmqguard/zmqguard" {
				g := filepath.Join(filepath.Dir(d), "shared", "vllm-golden")
				if st, err := os.Stat(g); err == nil && st.IsDir() {
					return g
				}
				return ""
			}
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

func modulePath(gomod string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) == 2 && string(f[0]) == "module" {
			return string(f[1])
		}
	}
	return ""
}

// Load reads every vector of one stream file ("kv-events", "engine-outputs",
// "coordinator", "nixl", "hashing"). When the vectors are missing it skips
// the test with one loud line, or fails it under CI.
func Load(t testing.TB, stream string) []Vector {
	t.Helper()
	dir := Dir()
	if dir == "" {
		msg := "VLLM GOLDEN VECTORS MISSING: ../shared/vllm-golden not found beside the module root " +
			"(set ZMQGUARD_GOLDEN_DIR to point at it); tests against vLLM's own bytes did not run"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	vs, err := ReadFile(filepath.Join(dir, stream+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatalf("golden: %s.jsonl holds no vectors", stream)
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
