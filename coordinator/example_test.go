package coordinator_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/socket"
)

// Example walks a two-engine coordinator through start-up, a stats report,
// a scanner's junk frame, a front-end wake-up and a stats publication.
func Example() {
	s, err := coordinator.NewState(2, coordinator.StateConfig{})
	if err != nil {
		panic(err)
	}

	// Start-up: each engine subscribes on the back publish socket; READY goes
	// out after the last one. A stray subscription to a topic is dropped.
	for _, frame := range []string{"\x01", "\x01probe", "\x01"} {
		a, err := s.OnBackMessage([]byte(frame))
		fmt.Printf("back %q: ready=%v drop=%v\n", frame, a.SendReady, decodeguard.ReasonOf(err))
	}

	// Engine 1 reports its queues (the frame as vLLM's engine sends it).
	frame := coordinator.AppendEngineCoreOutputs(nil, &coordinator.EngineCoreOutputs{
		EngineIndex: 1, HasStats: true, Timestamp: 12345.678,
		Stats: coordinator.SchedulerStats{NumWaitingReqs: 5, NumRunningReqs: 3, StepCounter: 42},
	})
	var m coordinator.EngineCoreOutputs
	if err := coordinator.DecodeEngineCoreOutputs(frame, &m); err != nil {
		panic(err)
	}
	if _, err := s.OnEngineOutput(&m); err != nil {
		panic(err)
	}

	// A port scanner's probe on the same socket is a classified drop.
	err = coordinator.DecodeEngineCoreOutputs([]byte{0x45}, &m)
	fmt.Println("junk frame:", decodeguard.ReasonOf(err))

	// A front-end sends a request to engine 0 while the engines are paused,
	// and asks the coordinator to wake the others.
	msg, err := coordinator.ParseFrontMessage(coordinator.AppendWakeIdentity(nil, 0, 0))
	if err != nil {
		panic(err)
	}
	a, _ := s.OnFrontMessage(msg)
	fmt.Printf("START_DP_WAVE %x | %x\n", coordinator.StartDPWaveFrame, a.AppendStartDPWave(nil))
	// Current vLLM (PR #51481): the wake proves nothing, as a paused engine
	// discards START_DP_WAVE; running waits for DP rank 0's start_wave.
	fmt.Println("running after the wake:", a.Running, "publish:", a.PublishWave)
	a, _ = s.OnEngineOutput(&coordinator.EngineCoreOutputs{EngineIndex: 0, HasStartWave: true, StartWave: 0})
	fmt.Printf("rank 0 start_wave: START_DP_WAVE %x, to front-ends: %x\n", a.AppendStartDPWave(nil), a.AppendWavePublish(nil))

	// The periodic publication, in the latest layout:
	// ([[0, 0, 0.0], [5, 3, 0.0]], 0, True).
	if s.Tick(time.Now()).PublishStats {
		fmt.Println("stats:", hex.EncodeToString(s.AppendStatsPublish(nil)))
	}
	// Output:
	// back "\x01": ready=false drop=none
	// back "\x01probe": ready=false drop=validate
	// back "\x01": ready=true drop=none
	// junk frame: decode
	// START_DP_WAVE 02 | 920000
	// running after the wake: false publish: false
	// rank 0 start_wave: START_DP_WAVE 920000, to front-ends: 93c000c3
	// stats: 9392930000cb0000000000000000930503cb000000000000000000c3
}

// ExampleParseFrontMessage parses the three kinds of front-end message.
func ExampleParseFrontMessage() {
	for _, h := range []string{
		"01",                                     // an XPUB subscription
		"92b05343414c455f454c41535449435f455004", // ("SCALE_ELASTIC_EP", 4)
		"92c402020007",                           // (b"\x02\x00", 7)
		"818001",                                 // a map keyed by a map
	} {
		b, _ := hex.DecodeString(h)
		m, err := coordinator.ParseFrontMessage(b)
		if err != nil {
			fmt.Println("drop:", decodeguard.ReasonOf(err))
			continue
		}
		fmt.Printf("%v engines=%d wave=%d exclude=%v/%d\n", m.Kind, m.Engines, m.Wave, m.HasExclude, m.Exclude)
	}
	// Output:
	// subscribe engines=0 wave=0 exclude=false/0
	// scale engines=4 wave=0 exclude=false/0
	// wake engines=0 wave=7 exclude=true/2
	// drop: decode
}

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

	fe, err := coordinator.DialFrontEnd(coordinator.FrontEndConfig{Front: c.FrontEndpoint()})
	if err != nil {
		panic(err)
	}
	defer fe.Close()
	eng, err := coordinator.DialEngine(coordinator.EngineConfig{
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
	scanner, err := socket.NewPush(socket.Options{Logger: quiet})
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
