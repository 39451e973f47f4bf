package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/vllmhash"
)

// FuzzKVIndexScoreBody: whatever body POST /score gets, in either mode, the
// handler answers 200 with a well-formed score, or 400/413 with an error,
// and never panics.
func FuzzKVIndexScoreBody(f *testing.F) {
	for _, s := range []string{`{"tokens": [1, 2, 3]}`, `{"tokens": [], "lora": "x", "model": "m", "block_size": 16}`,
		`{"tokens": [-1, 9223372036854775807]}`, `{"tokens": [1.5]}`, `{"tokens": null}`, `{`, ``, `[]`,
		`{"tokens": [1], "block_size": 70000}`, `{"tokens": [1]} {"tokens": [2]}`, `{"model": null}`} {
		f.Add(s)
	}
	x, err := kvindex.New(kvindex.Config{Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	defer x.Close()
	toks := kvmodel.Tokens(1, 64)
	x.ApplyEvents("e", []kvevents.Event{kvmodel.Store([]uint64{1, 2, 3, 4}, -1, toks, 16, "GPU", 0)})
	h, _ := vllmhash.New("sha256_cbor", "0")
	vx, err := kvindex.New(kvindex.Config{Keys: h.Keys, BlockSize: 16})
	if err != nil {
		f.Fatal(err)
	}
	defer vx.Close()
	servers := []*kvIndexServer{{x: x, logger: quietLogger()}, {x: vx, vllmKeys: true, vxBlockSize: 16, logger: quietLogger()}}
	f.Fuzz(func(t *testing.T, body string) {
		for _, s := range servers {
			w := httptest.NewRecorder()
			s.score(w, httptest.NewRequest(http.MethodPost, "/score", strings.NewReader(body)))
			switch w.Code {
			case http.StatusOK:
				var r kvScoreResponse
				if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || r.Engines == nil {
					t.Fatalf("200 with %q: %v", w.Body.String(), err)
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
				if !strings.Contains(w.Body.String(), `"error"`) {
					t.Fatalf("%d without an error: %q", w.Code, w.Body.String())
				}
			default:
				t.Fatalf("status %d for %q: %q", w.Code, body, w.Body.String())
			}
		}
	})
}
