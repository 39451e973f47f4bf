package ratelog

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	cases := []struct {
		in   []byte
		want string
	}{
		{nil, "len=0 hex="},
		{hx("a3e08080"), "len=4 hex=a3e08080"},
		{bytes.Repeat([]byte{0xab}, RenderPrefix), "len=64 hex=" + strings.Repeat("ab", RenderPrefix)},
		{bytes.Repeat([]byte{0xab}, 1234), "len=1234 hex=" + strings.Repeat("ab", RenderPrefix) + "…"},
	}
	for _, c := range cases {
		if got := Render(c.in); got != c.want {
			t.Errorf("Render(% x) = %q, want %q", c.in, got, c.want)
		}
		if got := Hex(c.in).String(); got != c.want {
			t.Errorf("Hex.String = %q, want %q", got, c.want)
		}
		if got := fmt.Sprint(Hex(c.in)); got != c.want {
			t.Errorf("fmt.Sprint(Hex) = %q, want %q", got, c.want)
		}
	}
	big := make([]byte, 1<<20)
	if got := len(Render(big)); got > maxRendered {
		t.Errorf("Render of 1 MiB is %d bytes, want <= %d", got, maxRendered)
	}
}

// Terminal escapes and other control bytes in a frame never reach the text.
func TestRenderNoEscapes(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	frames := [][]byte{
		[]byte("\x1b[31mred\x1b[0m"),
		[]byte("\x1b]0;title\x07\x1b[2J\r\n\x00\x7f\x9b"),
		all,
		append([]byte("\x1b[31m"), all...),
	}
	for _, b := range frames {
		var logs bytes.Buffer
		text := slog.New(slog.NewTextHandler(&logs, nil))
		text.Info("drop", "frame", Hex(b), "err", Render(b))
		json := slog.New(slog.NewJSONHandler(&logs, nil))
		json.Info("drop", "frame", Hex(b))
		outs := map[string]string{
			"Render":  Render(b),
			"Append":  string(AppendRender(nil, b)),
			"Sprintf": fmt.Sprintf("%v %s %q", Hex(b), Hex(b), Hex(b)),
			"slog":    logs.String(),
		}
		for name, s := range outs {
			if strings.Contains(s, "\x1b") || strings.Contains(s, "[31m") {
				t.Errorf("%s output contains an escape sequence: %q", name, s)
			}
			for _, r := range s {
				if r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r != '…' {
					t.Errorf("%s output contains %U: %q", name, r, s)
					break
				}
			}
		}
	}
}

func TestHexLogValue(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	logger.Info("drop", "frame", Hex(hx("a3e08080")))
	if got, want := logs.String(), "level=INFO msg=drop frame.len=4 frame.hex=a3e08080\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestAppendRenderNoAlloc(t *testing.T) {
	b := make([]byte, 5000)
	dst := make([]byte, 0, maxRendered)
	if n := testing.AllocsPerRun(100, func() { dst = AppendRender(dst[:0], b) }); n != 0 {
		t.Errorf("AppendRender allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Render(b) }); n != 1 {
		t.Errorf("Render allocates %v times, want 1", n)
	}
}

func TestSafeText(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"a\x1bb", `a\x1bb`},
		{"é", `\xc3\xa9`},
		{strings.Repeat("x", 300), strings.Repeat("x", 256) + "…"},
		{strings.Repeat("x", 254) + "\x00", strings.Repeat("x", 254) + "…"},
		{"", ""},
	}
	for _, c := range cases {
		if got := Escape(c.in, 256); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func hx(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
