package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/socket"
)

// ExampleCoordinator runs a coordinator for one engine on loopback, with a
// Go engine and a Go front-end: start-up, a scanner's junk frame dropped,
// stats published, and a wave round trip.
func ExampleCoordinator() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	c, err := coordinator.New(coordinator.Config{
		Front:         "tcp://127.0.0.1:0",
		BackOutput:    "tcp://127.0.0.1:0",
		BackPublish:   "tcp://127.0.0.1:0",
		Engines:       1,
		StatsInterval: 10 * time.Millisecond,
		Logger:        quiet,
	})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: c.FrontEndpoint()})
	if err != nil {
		panic(err)
	}
	defer fe.Close()
	eng, err := dppeer.DialEngine(dppeer.EngineConfig{
		BackPublish: c.BackPublishEndpoint(), BackOutput: c.BackOutputEndpoint()})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	if err := eng.WaitReady(ctx); err != nil {
		panic(err)
	}
	fmt.Println("engine 0: READY")

	// A port scanner pushes an int to the back output socket.
	scanner, err := socket.New("PUSH", socket.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer scanner.Close()
	if err := scanner.Dial(c.BackOutputEndpoint()); err != nil {
		panic(err)
	}
	if err := scanner.Send(ctx, []byte{0x45}); err != nil {
		panic(err)
	}

	// The engine reports 5 waiting and 3 running requests.
	if err := eng.SendStats(ctx, 0, 5, 3, 0, 1); err != nil {
		panic(err)
	}
	for {
		counts, wave, running, err := fe.NextStats(ctx)
		if err != nil {
			panic(err)
		}
		if len(counts) == 1 && counts[0] == [2]int{5, 3} {
			fmt.Printf("front-end: counts=%v wave=%d running=%v\n", counts, wave, running)
			break
		}
	}

	// A request arrives while the engines are paused: wake them.
	if err := fe.Wake(ctx, nil, 0); err != nil {
		panic(err)
	}
	wave, exclude, err := eng.NextStartWave(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("engine 0: START_DP_WAVE wave=%d exclude=%v\n", wave, exclude)

	// The wave ends; the front-ends learn at once.
	if err := eng.SendWaveComplete(ctx, 0, 0); err != nil {
		panic(err)
	}
	for {
		counts, wave, running, err := fe.NextStats(ctx)
		if err != nil {
			panic(err)
		}
		if counts == nil && wave == 1 {
			fmt.Printf("front-end: wave=%d running=%v\n", wave, running)
			break
		}
	}

	// The junk frame came on another connection: wait for its drop to be
	// counted.
	for c.Stats().Dropped == 0 {
		time.Sleep(time.Millisecond)
	}
	st := c.Stats()
	fmt.Printf("dropped: %d (decode %d)\n", st.Dropped, st.Drops[decodeguard.ReasonDecode])
	fmt.Println("close:", c.Close(), errors.Is(<-done, coordinator.ErrClosed))
	// Output:
	// engine 0: READY
	// front-end: counts=[[5 3]] wave=0 running=false
	// engine 0: START_DP_WAVE wave=0 exclude=<nil>
	// front-end: wave=1 running=false
	// dropped: 1 (decode 1)
	// close: <nil> true
}
