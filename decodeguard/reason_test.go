package decodeguard

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

func TestReasonNames(t *testing.T) {
	rs := Reasons()
	if len(rs) != int(numReasons)-1 {
		t.Fatalf("Reasons() has %d entries, want %d", len(rs), int(numReasons)-1)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		name := r.String()
		if !r.Valid() || seen[name] || name == "" {
			t.Errorf("reason %d: name %q valid %v", r, name, r.Valid())
		}
		seen[name] = true
		if p, ok := parseReason(name); !ok || p != r {
			t.Errorf("parseReason(%q) = %v, %v", name, p, ok)
		}
		var u Reason
		if err := u.UnmarshalText([]byte(name)); err != nil || u != r {
			t.Errorf("UnmarshalText(%q) = %v, %v", name, u, err)
		}
	}
	if ReasonNone.Valid() || Reason(int(numReasons)).Valid() {
		t.Error("ReasonNone or out-of-range reason is valid")
	}
	if got := ReasonUnsupported.String(); got != "unsupported" {
		t.Errorf("ReasonUnsupported = %q", got)
	}
	if got := Reason(200).String(); got != "reason(200)" {
		t.Errorf("Reason(200) = %q", got)
	}
	if _, ok := parseReason("none"); ok {
		t.Error("parseReason(none) ok")
	}
	var u Reason
	if err := u.UnmarshalText([]byte("bogus")); err == nil {
		t.Error("UnmarshalText(bogus) = nil")
	}
	j, err := json.Marshal(map[string]Reason{"r": ReasonDecoderPanic})
	if err != nil || string(j) != `{"r":"decoder-panic"}` {
		t.Errorf("json = %s, %v", j, err)
	}
}

func TestErrorClassification(t *testing.T) {
	e := &Error{Reason: ReasonDecode, Detail: "bad", Offset: 3, Err: errors.New("cause")}
	if got, want := e.Error(), "zmqguard: decode: bad at offset 3: cause"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("loop: %w", e)
	if !errors.Is(wrapped, &Error{Reason: ReasonDecode}) || errors.Is(wrapped, &Error{Reason: ReasonOversize}) {
		t.Error("errors.Is with sentinels")
	}
	if !errors.Is(wrapped, &Error{Reason: ReasonDecode}) {
		t.Error("errors.Is with a bare *Error")
	}
	if ReasonOf(wrapped) != ReasonDecode || !IsBadInput(wrapped) {
		t.Error("ReasonOf / IsBadInput of a wrapped error")
	}
	if ReasonOf(nil) != ReasonNone || IsBadInput(errors.New("bug")) || IsBadInput(nil) {
		t.Error("unclassified errors are bad input")
	}
	if WrapError(ReasonDecode, "x", nil) != nil {
		t.Error("WrapError(nil) != nil")
	}
	cause := errors.New("c")
	w := WrapError(ReasonValidate, "x", cause)
	if ReasonOf(w) != ReasonValidate || !errors.Is(w, cause) {
		t.Errorf("WrapError = %v", w)
	}
	if n := NewError(ReasonPolicy, "p"); n.Offset != -1 || n.Error() != "zmqguard: policy: p" {
		t.Errorf("NewError = %+v", n)
	}
	if IsBadInput(&Error{Reason: Reason(250)}) || IsBadInput(&Error{Reason: ReasonNone}) {
		t.Error("out-of-range or none reason is bad input")
	}
	var nilErr *Error
	if nilErr.Error() != "zmqguard: <nil>" {
		t.Error("nil *Error")
	}
}

func TestCountsJSONRoundTrip(t *testing.T) {
	var c Counts
	c[ReasonDecode] = 3
	c[ReasonOversize] = 1
	b, err := c.MarshalJSON()
	if err != nil || string(b) != `{"oversize":1,"decode":3}` && string(b) != `{"decode":3,"oversize":1}` {
		t.Fatalf("MarshalJSON = %s, %v", b, err)
	}
	var back Counts
	if err := back.UnmarshalJSON(b); err != nil || back != c || back.Total() != 4 {
		t.Fatalf("UnmarshalJSON(%s) = %v, %v", b, back, err)
	}
	if err := back.UnmarshalJSON([]byte(`{"no-such":1}`)); err == nil {
		t.Fatal("unknown reason accepted")
	}
}
