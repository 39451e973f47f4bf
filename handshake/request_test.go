package handshake

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

const (
	vecV3 = "93c40c6765745f6d6574615f6d73670001" // (GET_META_MSG, 0, 1)
	vecV2 = "92c40c6765745f6d6574615f6d736701"   // (GET_META_MSG, 1)
	vecTS = "cb40c81cd6c8b43958"                 // 12345.678
)

func TestRequestVectors(t *testing.T) {
	cases := []struct {
		req  Request
		want []byte
	}{
		{Request{Variant: V3, PP: 0, TP: 1}, mustHex(t, vecV3)},
		{Request{Variant: V2, TP: 1}, mustHex(t, vecV2)},
		{Request{Variant: V1}, []byte("get_meta_msg")},
		{Request{Variant: V3, PP: 200, TP: 65535}, mustHex(t, "93c40c6765745f6d6574615f6d7367ccc8cdffff")},
	}
	for _, c := range cases {
		got := appendRequest(nil, c.req)
		if !bytes.Equal(got, c.want) {
			t.Errorf("appendRequest(%+v) = %x, want %x", c.req, got, c.want)
		}
		parsed, err := parseRequest(c.want)
		if err != nil || parsed != c.req {
			t.Errorf("parseRequest(%x) = %+v, %v; want %+v", c.want, parsed, err, c.req)
		}
	}
	// The zero Variant encodes as V3.
	if got := appendRequest([]byte("x"), Request{TP: 1}); !bytes.Equal(got, append([]byte("x"), mustHex(t, vecV3)...)) {
		t.Errorf("zero Variant: %x", got)
	}
	for v, s := range map[Variant]string{V1: "V1", V2: "V2", V3: "V3", 0: "Variant(0)", 9: "Variant(9)"} {
		if v.String() != s {
			t.Errorf("Variant(%d).String() = %q", v, v.String())
		}
	}
}

func TestParseRequestAccepts(t *testing.T) {
	cases := map[string]Request{
		// The message as str (msgpack's old raw type) is accepted.
		"93ac6765745f6d6574615f6d73670203": {Variant: V3, PP: 2, TP: 3},
		// Ranks in any integer width, signed or unsigned.
		"93c40c6765745f6d6574615f6d7367d000d10005":           {Variant: V3, PP: 0, TP: 5},
		"92c40c6765745f6d6574615f6d7367d3000000000000ffff":   {Variant: V2, TP: 65535},
		"92c40c6765745f6d6574615f6d7367cf0000000000000007":   {Variant: V2, TP: 7},
		"92c40c6765745f6d6574615f6d7367ce00000009":           {Variant: V2, TP: 9},
		"93c40c6765745f6d6574615f6d7367d200000001d20000fffe": {Variant: V3, PP: 1, TP: 65534},
	}
	for h, want := range cases {
		got, err := parseRequest(mustHex(t, h))
		if err != nil || got != want {
			t.Errorf("parseRequest(%s) = %+v, %v; want %+v", h, got, err, want)
		}
	}
}

func TestParseRequestRefuses(t *testing.T) {
	msg := "c40c6765745f6d6574615f6d7367"
	deep := strings.Repeat("91", 40) + "00"
	cases := []struct {
		name   string
		in     string // hex
		raw    string // used when in is empty
		reason decodeguard.Reason
		detail string
	}{
		{"empty", "", "", decodeguard.ReasonDecode, "empty frame"},
		{"get_meta_msg plus byte", "", "get_meta_msg\x00", decodeguard.ReasonDecode, ""},
		{"GET_META_MSG upper", "", "GET_META_MSG", decodeguard.ReasonDecode, ""},
		{"bare bin", msg, "", decodeguard.ReasonDecode, "request: expected an array, got bin"},
		{"map", "81a16101", "", decodeguard.ReasonDecode, "expected an array, got map"},
		{"int (scanner probe)", "45", "", decodeguard.ReasonDecode, "expected an array, got int"},
		{"arity 0", "90", "", decodeguard.ReasonDecode, "expected 2 or 3 elements, got 0"},
		{"arity 1", "91" + msg, "", decodeguard.ReasonDecode, "expected 2 or 3 elements, got 1"},
		{"arity 4", "94" + msg + "000102", "", decodeguard.ReasonDecode, "expected 2 or 3 elements, got 4"},
		{"arity 16", "dc0010" + msg + strings.Repeat("00", 15), "", decodeguard.ReasonDecode, "expected 2 or 3 elements, got 16"},
		{"message int", "920001", "", decodeguard.ReasonDecode, "element 0 (message): expected bin, got int"},
		{"message nil", "92c001", "", decodeguard.ReasonDecode, "element 0 (message): expected bin, got nil"},
		{"message array", "929100" + "01", "", decodeguard.ReasonDecode, "expected bin, got array"},
		{"other message", "92c40568656c6c6f01", "", decodeguard.ReasonValidate, "is not get_meta_msg: len=5 hex=68656c6c6f"},
		{"other message escape", "92c4031b5b3201", "", decodeguard.ReasonValidate, "len=3 hex=1b5b32"},
		{"empty message", "92c40001", "", decodeguard.ReasonValidate, "len=0"},
		{"str invalid utf-8", "92a2ff1b01", "", decodeguard.ReasonDecode, "not valid UTF-8"},
		{"tp float", "92" + msg + "cb3ff0000000000000", "", decodeguard.ReasonDecode, "element 1 (tp_rank): expected an integer, got float64"},
		{"tp bool", "92" + msg + "c3", "", decodeguard.ReasonDecode, "element 1 (tp_rank): expected an integer, got bool"},
		{"tp str", "92" + msg + "a131", "", decodeguard.ReasonDecode, "expected an integer, got str"},
		{"tp nil", "92" + msg + "c0", "", decodeguard.ReasonDecode, "expected an integer, got nil"},
		{"pp float", "93" + msg + "ca3f80000000", "", decodeguard.ReasonDecode, "element 1 (pp_rank): expected an integer, got float32"},
		{"tp of V3 str", "93" + msg + "00a131", "", decodeguard.ReasonDecode, "element 2 (tp_rank): expected an integer, got str"},
		{"tp -1", "92" + msg + "ff", "", decodeguard.ReasonValidate, "element 1 (tp_rank) is negative"},
		{"pp -1", "93" + msg + "ff00", "", decodeguard.ReasonValidate, "element 1 (pp_rank) is negative"},
		{"tp int64 min", "92" + msg + "d38000000000000000", "", decodeguard.ReasonValidate, "is negative"},
		{"tp int8 -128", "92" + msg + "d080", "", decodeguard.ReasonValidate, "is negative"},
		{"tp 65536", "92" + msg + "ce00010000", "", decodeguard.ReasonValidate, "element 1 (tp_rank) is 65536, over MaxRank 65535"},
		{"tp uint64 max", "92" + msg + "cfffffffffffffffff", "", decodeguard.ReasonValidate, "is 18446744073709551615, over MaxRank"},
		{"pp 2^40", "93" + msg + "d3000001000000000000", "", decodeguard.ReasonValidate, "element 1 (pp_rank) is 1099511627776, over MaxRank"},
		{"truncated", "93" + msg + "00", "", decodeguard.ReasonDecode, "truncated"},
		{"trailing", vecV2 + "00", "", decodeguard.ReasonDecode, "trailing bytes"},
		{"array claims 2^32-1", "ddffffffff" + msg, "", decodeguard.ReasonDecode, "array length exceeds"},
		{"deep", deep, "", decodeguard.ReasonOversize, "nesting deeper"},
		{"ext rank", "92" + msg + "d40100", "", decodeguard.ReasonDecode, "ext type not allowed"},
		{"0xc1", "92" + msg + "c1", "", decodeguard.ReasonDecode, "0xc1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.raw)
			if c.in != "" {
				in = mustHex(t, c.in)
			}
			req, err := parseRequest(in)
			if err == nil {
				t.Fatalf("accepted as %+v", req)
			}
			if req != (Request{}) {
				t.Errorf("non-zero Request %+v with error", req)
			}
			checkClassified(t, err, c.reason)
			if !strings.Contains(err.Error(), c.detail) {
				t.Errorf("error %q lacks %q", err, c.detail)
			}
		})
	}
}

func TestParseRequestZeroAlloc(t *testing.T) {
	for _, h := range []string{vecV3, vecV2, hex.EncodeToString([]byte(nixlwire.GetMetaMsg))} {
		body := mustHex(t, h)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := parseRequest(body); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("parseRequest(%s): %v allocs per run, want 0", h, allocs)
		}
	}
	dst := make([]byte, 0, 64)
	if a := testing.AllocsPerRun(100, func() { dst = appendRequest(dst[:0], Request{Variant: V3, TP: 3}) }); a != 0 {
		t.Errorf("AppendRequest: %v allocs", a)
	}
}

func TestAppendParseRequestProperty(t *testing.T) {
	for pp := 0; pp <= nixlwire.MaxRank; pp += 997 {
		for _, tp := range []int{0, 1, 127, 128, 255, 256, nixlwire.MaxRank} {
			for _, v := range []Variant{V2, V3} {
				req := Request{Variant: v, PP: pp, TP: tp}
				if v == V2 {
					req.PP = 0
				}
				got, err := parseRequest(appendRequest(nil, req))
				if err != nil || got != req {
					t.Fatalf("round trip %+v: %+v, %v", req, got, err)
				}
			}
		}
	}
}

func TestTimestamp(t *testing.T) {
	b := nixlwire.AppendTimestamp(nil, 12345.678)
	if hex.EncodeToString(b) != vecTS {
		t.Fatalf("AppendTimestamp = %x, want %s", b, vecTS)
	}
	if f, err := nixlwire.ParseTimestamp(b); err != nil || f != 12345.678 {
		t.Fatalf("ParseTimestamp = %v, %v", f, err)
	}
	// Always float64, even for integral values.
	if b := nixlwire.AppendTimestamp(nil, 0); hex.EncodeToString(b) != "cb0000000000000000" {
		t.Fatalf("nixlwire.AppendTimestamp(0) = %x", b)
	}
	ok := map[string]float64{
		"ca3fc00000":         1.5,
		"07":                 7,
		"ff":                 -1,
		"cd0100":             256,
		"cfffffffffffffffff": math.MaxUint64,
		"cb8000000000000000": 0, // -0.0
	}
	for h, want := range ok {
		if f, err := nixlwire.ParseTimestamp(mustHex(t, h)); err != nil || f != want {
			t.Errorf("nixlwire.ParseTimestamp(%s) = %v, %v; want %v", h, f, err, want)
		}
	}
	bad := map[string]decodeguard.Reason{
		"":                     decodeguard.ReasonDecode,
		"a131":                 decodeguard.ReasonDecode,
		"c0":                   decodeguard.ReasonDecode,
		"9101":                 decodeguard.ReasonDecode,
		"cb40c81cd6c8b439":     decodeguard.ReasonDecode,   // truncated
		"cb40c81cd6c8b4395800": decodeguard.ReasonDecode,   // trailing
		"cb7ff8000000000000":   decodeguard.ReasonValidate, // NaN
		"cb7ff0000000000000":   decodeguard.ReasonValidate, // +Inf
		"cafff00000":           decodeguard.ReasonValidate, // float32 -Inf
	}
	for h, want := range bad {
		_, err := nixlwire.ParseTimestamp(mustHex(t, h))
		if decodeguard.ReasonOf(err) != want {
			t.Errorf("nixlwire.ParseTimestamp(%s): %v, want %v", h, err, want)
		}
	}
	if _, err := nixlwire.ParseTimestamp(msgp.AppendString(nil, "\x1b[2J")); err == nil || strings.Contains(err.Error(), "\x1b") {
		t.Errorf("str timestamp: %v", err)
	}
}

func BenchmarkParseRequestV3(b *testing.B) {
	body := mustHex(b, vecV3)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := parseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseRequestBad(b *testing.B) {
	body := mustHex(b, "94"+"c40c6765745f6d6574615f6d7367"+"000102")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseRequest(body); err == nil {
			b.Fatal("accepted")
		}
	}
}

// TestParseRequestDetails: the classified refusals a listener logs, word
// for word (formerly the package Example's first half).
func TestParseRequestDetails(t *testing.T) {
	body, _ := hex.DecodeString("93c40c6765745f6d6574615f6d73670001") // (GET_META_MSG, 0, 1)
	req, err := parseRequest(body)
	if got := fmt.Sprintf("%v pp=%d tp=%d err=%v", req.Variant, req.PP, req.TP, err); got != "V3 pp=0 tp=1 err=<nil>" {
		t.Errorf("valid V3: %s", got)
	}
	_, err = parseRequest([]byte{0x94, 0xc0, 0, 1, 2}) // wrong arity
	if got := fmt.Sprint(decodeguard.ReasonOf(err), " | ", err); got != "decode | zmqguard: decode: request array: expected 2 or 3 elements, got 4 at offset 0" {
		t.Errorf("wrong arity: %s", got)
	}
	_, err = parseRequest([]byte{0x92, 0xc4, 0x02, 0x1b, 0x5b, 0x01}) // wrong message
	if got := fmt.Sprint(decodeguard.ReasonOf(err), " | ", err); got != "validate | zmqguard: validate: element 0 (message) is not get_meta_msg: len=2 hex=1b5b at offset 1" {
		t.Errorf("wrong message: %s", got)
	}
}
