package ratelog_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// A flood from one connection: one detail line (the caller's), then the
// rest in one summary line that names no peer.
func Example() {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	l := ratelog.New(ratelog.Config{Logger: log, Component: "jobs"})
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range 1000 {
		if l.Drop(decodeguard.ReasonDecode.String(), "127.0.0.1:40000", t0.Add(time.Duration(i)*time.Millisecond)) == ratelog.First {
			log.Warn("dropped a message (first from this connection)", ratelog.KeyPeer, "127.0.0.1:40000", ratelog.KeyPrefixHex, "c1")
		}
	}
	l.Flush(t0.Add(time.Second))
	// Output:
	// level=WARN msg="dropped a message (first from this connection)" peer=127.0.0.1:40000 prefix_hex=c1
	// level=WARN msg="zmqguard: dropped messages (summary)" component=jobs reason=decode count=999 conns=1 since=1s
}

func ExampleRender() {
	frame := []byte("\x1b[31mnot a msgpack frame\x1b[0m")
	fmt.Println(ratelog.Render(frame))
	fmt.Println(ratelog.Render(bytes.Repeat([]byte{0xff}, 100)))
	// Output:
	// len=28 hex=1b5b33316d6e6f742061206d73677061636b206672616d651b5b306d
	// len=100 hex=ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff…
}

func ExampleHex() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	frame := []byte{0xa3, 0xe0, 0x80, 0x80}
	err := msgpscan.Scan(frame, nil)
	logger.Warn("dropped frame", "reason", decodeguard.ReasonOf(err), "frame", ratelog.Hex(frame))
	// Output: level=WARN msg="dropped frame" reason=decode frame.len=4 frame.hex=a3e08080
}
