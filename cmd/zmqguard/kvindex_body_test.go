package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/zmqguard/zmqguard/internal/testkit/kvload"
	"github.com/zmqguard/zmqguard/kvindex"
)

// jsonScoreBody decodes body the way POST /score did before issue 37's
// streaming decoder: json.Decoder with DisallowUnknownFields, More, then
// the token limit.
func jsonScoreBody(r io.Reader, maxTokens int) (kvScoreRequest, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var req kvScoreRequest
	if err := dec.Decode(&req); err != nil {
		return kvScoreRequest{}, err
	}
	if dec.More() {
		return kvScoreRequest{}, errors.New("more than one value")
	}
	if len(req.Tokens) > maxTokens {
		return kvScoreRequest{}, fmt.Errorf("%d tokens, over %d", len(req.Tokens), maxTokens)
	}
	return req, nil
}

// sameAsJSON decodes body with both decoders (the new one reading it
// whole, a byte at a time, and spilling values to chunks early) and fails unless they agree: both refuse,
// or both accept with the same values.
func sameAsJSON(t *testing.T, body string, maxTokens int) (kvScoreRequest, error) {
	t.Helper()
	want, wantErr := jsonScoreBody(strings.NewReader(body), maxTokens)
	got, err := decodeScoreBody(strings.NewReader(body), maxTokens)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("body %q: streaming decoder: %v; encoding/json: %v", body, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("body %q: streaming decoder %s; encoding/json %s", body, showReq(got), showReq(want))
	}
	got1, err1 := decodeScoreBody(iotest.OneByteReader(strings.NewReader(body)), maxTokens)
	if (err1 == nil) != (err == nil) || !reflect.DeepEqual(got1, got) {
		t.Fatalf("body %q: a byte at a time: %s, %v; whole: %s, %v", body, showReq(got1), err1, showReq(got), err)
	}
	// Values of over 8 bytes spilled to chunks.
	got8, _, err8 := decodeScoreBodyInline(strings.NewReader(body), maxTokens, 8)
	if (err8 == nil) != (err == nil) || !reflect.DeepEqual(got8, got) {
		t.Fatalf("body %q: spilling past 8 bytes: %s, %v; inline: %s, %v", body, showReq(got8), err8, showReq(got), err)
	}
	if err != nil && strings.ContainsAny(err.Error(), "\n") {
		t.Fatalf("body %q: error of more than one line: %q", body, err)
	}
	return got, err
}

func showReq(r kvScoreRequest) string {
	m := "<nil>"
	if r.Model != nil {
		m = strconv.Quote(*r.Model)
	}
	return fmt.Sprintf("{tokens %#v lora %q model %s block_size %d engines %#v}", r.Tokens, r.Lora, m, r.BlockSize, r.Engines)
}

// TestScoreBodyMatchesJSON: bodies accepted and refused as encoding/json
// accepted and refused them, with the same values.
func TestScoreBodyMatchesJSON(t *testing.T) {
	accepted := []string{
		`{"tokens": [1, 2, 3]}`,
		`{"tokens": [], "lora": "x", "model": "m", "block_size": 16}`,
		`{"tokens": [-1, 9223372036854775807, -9223372036854775808, 0, -0]}`,
		`{"tokens": null}`, `{"model": null}`, `null`, `{}`, " \t\r\n{ } \n",
		`{"tokens":[1,2,3],"tokens":[7]}`,                                // last wins
		`{"tokens":[1,2,3],"tokens":[7],"tokens":[null,null,null]}`,      // encoding/json keeps 7, 2, 3
		`{"tokens":[1,2,3],"tokens":[],"tokens":[null,null]}`,            // [] starts afresh: 0, 0
		`{"tokens":[1,2],"tokens":null,"tokens":[null]}`,                 // so does null
		`{"tokens":[null, 5]}`,                                           // null alone is 0
		`{"lora":"a","lora":null}`,                                       // null keeps a string
		`{"model":"a","model":null}`,                                     // and clears a pointer
		`{"engines":["a","b","c"],"engines":[null,"x"]}`,                 // engines reuse their slice too
		`{"engines":null}`, `{"engines":[]}`, `{"engines":["e1", null]}`, //
		`{"block_size": null}`, `{"block_size": -0}`, `{"block_size": 70000}`, // range is the handler's
		`{"TOKENS": [1], "Lora": "L", "MODEL": "M", "Block_Size": 2, "eNgInEs": ["e"]}`, // keys fold
		"{\"to\u212aens\": [1], \"block_\u017fize\": 4}",                                // Kelvin sign, long s
		`{"tok\u0065ns": [1], "\u006cora": "\u00e9\ud83d\ude00\n\"\\\/\b\f\r\t"}`,       // escapes
		"{\"lora\": \"\xff\xfe ok \xed\xa0\x80\"}",                                      // invalid UTF-8 replaced
		`{"lora": "\ud800", "model": "\udc00\ud800x"}`,                                  // lone surrogates
		`{"tokens": [1]} }`, `{"tokens": [1]}]`, `{"tokens": [1]}    `, // More: no second value
		`null }`,
		"{\"tokens\"\n:\n[\n1\n,\n2\n]\n,\n\"lora\"\t:\t\"\"}",
		`{"tokens": [` + strings.Repeat("1234567,", 20000) + `1]}`, // across read buffers
		`{"tokens": [123456789012345678, 999999999999999999, 1000000000000000000, 9223372036854775807, 1, 12]}`,
		`{"tokens": [1 ,2 , 3,	4]}`,
		`{"lora": "` + strings.Repeat("long \u00e9 name ", 40000) + `", "model": "` + strings.Repeat("m", 300000) + `"}`,
		`{"engines": [` + strings.Repeat(`"tcp://10.0.0.1:5557", null, `, 20000) + `"e"], "model": "` + "\xff" + strings.Repeat("\xfe", 300000) + `"}`,
		`{"lora": "` + strings.Repeat("x", 300000) + "\xff" + `"}`, `{"lora": "` + strings.Repeat("é", 300000) + `"}`,
	}
	var many strings.Builder // three pooled chunks past the first
	many.WriteString(`{"tokens": [0`)
	for i := 1; i < 2*scoreChunk+scoreFirstChunk+7; i++ {
		fmt.Fprintf(&many, ",%d", i*7919%1000003)
	}
	many.WriteString(`], "tokens": [null, 5]}`)
	accepted = append(accepted, many.String(), strings.TrimSuffix(many.String(), `, "tokens": [null, 5]}`)+"}")
	for _, b := range accepted {
		if _, err := sameAsJSON(t, b, kvindex.MaxScoreTokens); err != nil {
			t.Errorf("body %q refused: %v", b, err)
		}
	}
	refused := []string{
		``, ` `, `{`, `{"tokens": [1`, `{"tokens": [1,`, `{"tokens": [1]`, `{"tokens"`, `{"tokens":`, `nul`,
		`[]`, `"x"`, `1`, `true`, `{"tokens": "x"}`, `{"tokens": {}}`, `{"tokens": 1}`, `{"tokens": true}`,
		`{"tokens": [1.5]}`, `{"tokens": [1e3]}`, `{"tokens": [123456789012345678.5, 1, 2, 3, 4, 5, 6, 7, 8, 9]}`,
		`{"tokens": [123456789012345678e1, 1, 2, 3, 4, 5, 6, 7, 8, 9]}`, `{"tokens": [1234567890123456789012, 1, 2, 3]}`,
		`{"tokens": [12-3, 1, 2, 3, 4, 5, 6, 7, 8, 9]}`, `{"tokens": [12x, 1, 2, 3, 4, 5, 6, 7, 8, 9]}`, `{"tokens": [1E3]}`, `{"tokens": [1.]}`, `{"tokens": [01]}`,
		`{"tokens": [-]}`, `{"tokens": [--1]}`, `{"tokens": [+1]}`, `{"tokens": [9223372036854775808]}`,
		`{"tokens": [-9223372036854775809]}`, `{"tokens": [99999999999999999999999]}`, `{"tokens": ["1"]}`,
		`{"tokens": [[1]]}`, `{"tokens": [true]}`, `{"tokens": [1,]}`, `{"tokens": [,1]}`, `{"tokens": [1 2]}`,
		`{"tokens": [nul]}`, `{"tokens": [nullx]}`, `{"tokens": [1], "nope": 1}`, `{"nope": 1}`,
		`{"tokens": [1]} {"tokens": [2]}`, `{"tokens": [1]} x`, `{"tokens": [1]} 1`, `null null`,
		`{"tokens": [1],}`, `{,}`, `{"tokens" [1]}`, `{tokens: [1]}`, `{"lora": 1}`, `{"lora": ["x"]}`,
		`{"model": true}`, `{"block_size": "16"}`, `{"block_size": 1.5}`, `{"block_size": 1e3}`,
		`{"block_size": 99999999999999999999}`, `{"block_size": 12345678901234567890123}`, `{"block_size": -}`,
		`{"engines": "e"}`, `{"engines": [1]}`, `{"engines": [["e"]]}`, `{"engines": ["e",]}`, `{"engines": ["e"`,
		`{"lora": "a` + "\n" + `"}`, `{"lora": "\x"}`, `{"lora": "\u12"}`, `{"lo\x": 1}`, "{\"lo\x01ra\": \"\"}",
		`{"` + strings.Repeat("k", 100) + `": 1}`, `{"tokens": [1]` + strings.Repeat(" ", 100) + `,`,
		"\xef\xbb\xbf{}", // a byte-order mark
	}
	for _, b := range refused {
		if _, err := sameAsJSON(t, b, kvindex.MaxScoreTokens); err == nil {
			t.Errorf("body %q accepted", b)
		}
	}
}

// TestScoreBodyTokenLimit: a tokens array is refused when it passes the
// limit, at the token that passes it, naming the limit.
func TestScoreBodyTokenLimit(t *testing.T) {
	if _, err := sameAsJSON(t, `{"tokens": [1, 2, 3, 4]}`, 4); err != nil {
		t.Fatalf("4 tokens of 4: %v", err)
	}
	_, err := sameAsJSON(t, `{"tokens": [1, 2, 3, 4, 5, 6]}`, 4)
	var tooMany *scoreTooManyTokens
	if !errors.As(err, &tooMany) || tooMany.Off != int64(strings.Index(`{"tokens": [1, 2, 3, 4, 5, 6]}`, "5")) ||
		!strings.Contains(err.Error(), "over 4 tokens") {
		t.Fatalf("6 tokens of 4: %v", err)
	}
	// Refused before the rest is read: a reader that fails past the fifth
	// token is never read that far.
	r := io.MultiReader(strings.NewReader(`{"tokens": [1, 2, 3, 4, 5, `), iotest.ErrReader(errors.New("read past the limit")))
	if _, err := decodeScoreBody(r, 4); !errors.As(err, &tooMany) {
		t.Fatalf("the rest was read: %v", err)
	}
	// Deliberate difference: encoding/json decoded every array and kept
	// the last, so a long array replaced by a short one passed.
	body := `{"tokens": [1, 2, 3, 4, 5], "tokens": [1]}`
	if _, err := jsonScoreBody(strings.NewReader(body), 4); err != nil {
		t.Fatalf("encoding/json refused %q: %v", body, err)
	}
	if _, err := decodeScoreBody(strings.NewReader(body), 4); !errors.As(err, &tooMany) {
		t.Fatalf("%q: %v (want the token limit)", body, err)
	}
}

// TestScoreBodyErrors: errors name what was wrong and where; a body over
// the cap is the reader's *http.MaxBytesError, as it was.
func TestScoreBodyErrors(t *testing.T) {
	for body, want := range map[string]string{
		``:                                   "EOF",
		`{"tokens": [1`:                      "unexpected EOF",
		`{"tokens": [1.5]}`:                  "tokens: a number with a fraction or an exponent is not a token id (at offset 12)",
		`{"tokens": [1], "nope": 1}`:         `unknown field "nope" (at offset 16)`,
		`{"tokens": [1]} {}`:                 "more than one value (at offset 16)",
		`{"tokens": [99999999999999999999]}`: "tokens: integer out of int64 range (at offset 12)",
		`{"block_size": 1.5}`:                "block_size: json: cannot unmarshal number 1.5 into Go value of type int (at offset 15)",
		`{"engines": [1]}`:                   "engines: element is a number, not a string (at offset 13)",
		`[]`:                                 "an array where the request object was expected (at offset 0)",
	} {
		_, err := decodeScoreBody(strings.NewReader(body), kvindex.MaxScoreTokens)
		if err == nil || err.Error() != want {
			t.Errorf("body %q: %v (want %q)", body, err, want)
		}
	}
	for _, body := range []string{
		`{"tokens": [` + strings.Repeat("1,", 600) + `1]}`,
		`{"lora": "` + strings.Repeat("x", 1200) + `"}`,
		`{"engines": ["a", ` + strings.Repeat(`"e",`, 300) + `"b"]}`,
	} {
		var tooBig *http.MaxBytesError
		_, err := decodeScoreBody(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), 1000), kvindex.MaxScoreTokens)
		_, jerr := jsonScoreBody(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), 1000), kvindex.MaxScoreTokens)
		if !errors.As(err, &tooBig) || !errors.As(jerr, &tooBig) {
			t.Errorf("body of %d bytes over a cap of 1000: %v (encoding/json: %v)", len(body), err, jerr)
		}
	}
	// As json.Decoder's More, anything past the cap after the value is no
	// second value (More peeks, and a read error is none).
	for _, body := range []string{`{"tokens": [1]}` + strings.Repeat(" ", 1200), `{"tokens": [1]}` + strings.Repeat(" ", 1200) + "x"} {
		req, err := decodeScoreBody(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), 1000), 4)
		jreq, jerr := jsonScoreBody(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), 1000), 4)
		if err != nil || jerr != nil || !reflect.DeepEqual(req, jreq) {
			t.Errorf("trailing space past the cap: %v %v (encoding/json: %v %v)", req, err, jreq, jerr)
		}
	}
}

// TestScoreHandlerBody: the handler answers 400 naming the error, 413 over
// the cap, one line each.
func TestScoreHandlerBody(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	s := &kvIndexServer{x: x, logger: quietLogger()}
	many := `{"tokens": [` + strings.Repeat("1,", kvindex.MaxScoreTokens) + `1]}`
	for body, want := range map[string]string{
		`{"tokens": [1, 2]}`: `"prompt_blocks":0`,
		`{"tokens": [1.5]}`:  "bad JSON body: tokens: a number with a fraction",
		`{"x": 1}`:           `bad JSON body: unknown field \"x\" (at offset 1)`,
		many:                 fmt.Sprintf("over %d tokens (token %d at offset %d)", kvindex.MaxScoreTokens, kvindex.MaxScoreTokens+1, 12+2*kvindex.MaxScoreTokens),
		`{"lora": "` + strings.Repeat("x", kvIndexMaxBody) + `"}`: fmt.Sprintf("body over %d bytes", kvIndexMaxBody),
	} {
		w := httptest.NewRecorder()
		s.score(w, httptest.NewRequest(http.MethodPost, "/score", strings.NewReader(body)))
		if !strings.Contains(w.Body.String(), want) || strings.Count(w.Body.String(), "\n") != 1 {
			t.Errorf("body of %d bytes: %d %q (want %q)", len(body), w.Code, w.Body.String(), want)
		}
	}
}

// BenchmarkScoreBodyDecode: the memory and time of decoding a /score body,
// encoding/json (the old path) beside the streaming decoder, for an 8 MiB
// body of 7-digit tokens, a 2 MiB one of 1-digit tokens (a million each),
// an 8 MiB LoRA name and 8 MiB of candidate engines' names. B/body-B is B/op over the body's bytes; peak-B/body-B adds the
// pooled chunks the streaming decode held (taken from the pool, so not in
// B/op, but held while it decodes).
func BenchmarkScoreBodyDecode(b *testing.B) {
	dense := []byte(`{"tokens":[` + strings.Repeat("1,", kvindex.MaxScoreTokens-1) + `1]}`)
	for _, c := range []struct {
		name string
		body []byte
	}{{"tokens8MiB", kvload.ScoreBody(8 << 20)}, {"dense2MiB", dense},
		{"lora8MiB", []byte(`{"lora":"` + strings.Repeat("x", 8<<20-12) + `"}`)},
		{"engines8MiB", []byte(`{"engines":[` + strings.Repeat(`"tcp://10.0.0.1:5557",`, (8<<20)/22) + `""]}`)}} {
		b.Run(c.name+"/json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			start := totalAlloc()
			for b.Loop() {
				if _, err := jsonScoreBody(bytes.NewReader(c.body), kvindex.MaxScoreTokens); err != nil {
					b.Fatal(err)
				}
			}
			reportPerBody(b, start, len(c.body), 0)
		})
		b.Run(c.name+"/stream", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			peak, start := 0, totalAlloc()
			for b.Loop() {
				_, p, err := decodeScoreBodyPeak(bytes.NewReader(c.body), kvindex.MaxScoreTokens)
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, p)
			}
			reportPerBody(b, start, len(c.body), peak)
		})
	}
}

// totalAlloc is the bytes allocated so far by the process.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// reportPerBody reports the bytes allocated per op since start over the
// body's bytes, and with pooled bytes added.
func reportPerBody(b *testing.B, start uint64, body, pooled int) {
	perOp := float64(totalAlloc()-start) / float64(b.N)
	b.ReportMetric(perOp/float64(body), "B/body-B")
	if pooled > 0 {
		b.ReportMetric((perOp+float64(pooled))/float64(body), "peak-B/body-B")
	}
}

// FuzzScoreBodyMatchesJSON: the streaming decoder accepts what encoding/json
// (the old path) accepted, with the same values, and refuses what it
// refused; read whole or a byte at a time. With a limit of 4 tokens it
// accepts only what it accepts without one (same values, at most 4
// tokens), and refuses whatever encoding/json refused. The deliberate
// differences (kvindex_body.go) need bodies over the cap, over the token
// limit or with keys of over 64 bytes that encoding/json would also
// refuse: none arises under the real limit here.
func FuzzScoreBodyMatchesJSON(f *testing.F) {
	for _, s := range []string{`{"tokens": [1, 2, 3]}`, `{"tokens": [], "lora": "x", "model": "m", "block_size": 16}`,
		`{"tokens": [-1, 9223372036854775807]}`, `{"tokens": [1.5]}`, `{"tokens": null}`, `{`, ``, `[]`,
		`{"tokens": [1], "block_size": 70000}`, `{"tokens": [1]} {"tokens": [2]}`, `{"model": null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got, err := sameAsJSON(t, body, kvindex.MaxScoreTokens)
		got4, err4 := decodeScoreBody(strings.NewReader(body), 4)
		var tooMany *scoreTooManyTokens
		switch {
		case err4 == nil && (err != nil || !reflect.DeepEqual(got4, got) || len(got4.Tokens) > 4):
			t.Fatalf("body %q: limit 4: %s; no limit: %s, %v", body, showReq(got4), showReq(got), err)
		case err4 != nil && err == nil && len(got.Tokens) <= 4 && !errors.As(err4, &tooMany):
			t.Fatalf("body %q: limit 4 refused it (%v), not for the limit", body, err4)
		}
	})
}
