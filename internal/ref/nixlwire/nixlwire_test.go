package nixlwire

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/decodeguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The codecs are tested in depth by package handshake, against vLLM's own
// bytes and Python peers; these cover what only this package states.

func TestAppendRequestForms(t *testing.T) {
	for _, c := range []struct {
		variant, pp, tp int
		want            string
	}{
		{1, 5, 5, "get_meta_msg"},
		{2, 9, 1, "\x92\xc4\x0cget_meta_msg\x01"},
		{3, 0, 1, "\x93\xc4\x0cget_meta_msg\x00\x01"},
		{0, 2, 300, "\x93\xc4\x0cget_meta_msg\x02\xcd\x01\x2c"},
	} {
		if got := string(AppendRequest(nil, c.variant, c.pp, c.tp)); got != c.want {
			t.Errorf("AppendRequest(%d, %d, %d) = %q, want %q", c.variant, c.pp, c.tp, got, c.want)
		}
	}
}

func TestParseTimestampRefuses(t *testing.T) {
	for in, want := range map[string]decodeguard.Reason{
		"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x01": decodeguard.ReasonValidate, // NaN
		"\xa1x":                                decodeguard.ReasonDecode,   // a str
		"\xcb\x00":                             decodeguard.ReasonDecode,   // truncated
	} {
		if _, err := ParseTimestamp([]byte(in)); decodeguard.ReasonOf(err) != want {
			t.Errorf("ParseTimestamp(%x) = %v, want reason %v", in, err, want)
		}
	}
}

func TestSafeText(t *testing.T) {
	if got := SafeText("engine-0"); got != `"engine-0"` {
		t.Errorf("SafeText(engine-0) = %s", got)
	}
	for _, s := range []string{"\x1b[31mred", strings.Repeat("a", 129), "caf\xc3\xa9"} {
		got := SafeText(s)
		if !strings.HasPrefix(got, "len=") {
			t.Errorf("SafeText(%q) = %q, want a length and hex prefix", s, got)
		}
		for _, r := range got {
			if unicode.IsControl(r) || r == 'é' || r == utf8.RuneError {
				t.Errorf("SafeText(%q) = %q holds %q", s, got, r)
			}
		}
	}
}
