package golden

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryStreamLoads checks that each stream file parses, that every
// vector's frames are valid hex and that each names its message kind.
func TestEveryStreamLoads(t *testing.T) {
	for _, s := range []string{"kv-events", "engine-outputs", "coordinator", "nixl", "hashing"} {
		vs := Load(t, s)
		for _, v := range vs {
			if v.Stream != s {
				t.Errorf("%s: stream %q in %s.jsonl", v.ID, v.Stream, s)
			}
			if _, err := v.Frames(); err != nil {
				t.Error(err)
			}
			if v.Message() == "" {
				t.Errorf("%s: no values.message or values.kind", v.ID)
			}
		}
	}
}

// TestSGLangLoads checks the SGLang vectors the same way, and that each
// names the SGLang commit that made it.
func TestSGLangLoads(t *testing.T) {
	vs := LoadSGLang(t, "kv-events")
	if len(vs) < 20 {
		t.Fatalf("%d SGLang vectors, want the 29 the README lists", len(vs))
	}
	for _, v := range vs {
		if _, err := v.Frames(); err != nil {
			t.Error(err)
		}
		if v.SGLangCommit == "" || v.Message() == "" {
			t.Errorf("%s: no sglang_commit or values.message", v.ID)
		}
	}
}
