package hostile_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
	"github.com/zmqguard/zmqguard/socket"
)

// Replay the payload hazards at a hardened PULL socket on loopback and check
// that it still answers after each one.
func Example() {
	opts := socket.DefaultOptions()
	opts.Logger = slog.New(slog.DiscardHandler)
	pull, _ := socket.New("PULL", opts)
	defer pull.Close()
	pull.Bind("tcp://127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { // a PULL must be read
		for {
			if _, err := pull.Recv(ctx); err != nil {
				return
			}
		}
	}()

	var payloads []hostile.Probe
	for _, p := range hostile.Corpus(hostile.Options{Hold: 50 * time.Millisecond}) {
		if p.Class == hostile.ClassPayload {
			payloads = append(payloads, p)
		}
	}
	rep, _ := hostile.Scan(ctx, []string{pull.Endpoint()}, hostile.ScanConfig{Probes: payloads})
	fmt.Println("target type:", rep.Types[0])
	for _, r := range rep.Results {
		fmt.Printf("%-22s sent %d, alive after: %v\n", r.Probe, r.Sent, r.Alive())
	}
	fmt.Println("oversize connections refused:", pull.Stats().Refused[decodeguard.ReasonOversize] > 0)
	// Output:
	// target type: PULL
	// payload-a3e08080       sent 1, alive after: true
	// payload-818001         sent 1, alive after: true
	// payload-nesting-20000  sent 1, alive after: true
	// payload-ddffffffff     sent 1, alive after: true
	// payload-45             sent 1, alive after: true
	// payload-empty-frame    sent 1, alive after: true
	// payload-1MiB+1         sent 1, alive after: true
	// oversize connections refused: true
}
