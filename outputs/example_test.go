package outputs_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
)

// A front-end's output socket: engines connect and push; a junk frame is
// dropped and counted, the valid message after it is delivered, and the
// engine's ENGINE_CORE_DEAD arrives as an event.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	dead := make(chan outputs.EngineDeadError, 1)
	r, err := outputs.New(outputs.Config{
		Logger: quiet,
		Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
			for _, o := range m.Outputs {
				fmt.Printf("engine %d: %s %v\n", m.EngineIndex, o.RequestID, o.NewTokenIDs)
			}
			return nil
		},
		OnEngineDead: func(e outputs.EngineDeadError) { dead <- e },
	})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	// An engine (here a Go one; a vLLM engine core sends the same bytes).
	opts := socket.DefaultOptions()
	opts.Logger = quiet
	engine, _ := socket.New("PUSH", opts)
	defer engine.Close()
	_ = engine.Dial(r.Endpoint())
	var enc enginecore.Encoder
	_ = engine.Send(ctx, []byte{0x45}) // a scanner's junk frame
	_ = engine.Send(ctx, enc.Encode(&enginecore.Message{
		Header:  enginecore.Header{EngineIndex: 1, Timestamp: 1},
		Outputs: []enginecore.Output{{RequestID: []byte("req-1"), NewTokenIDs: []int64{11, 12}}},
	})...)
	_ = engine.Send(ctx, []byte("ENGINE_CORE_DEAD"))

	e := <-dead
	cancel()
	<-done
	st := r.Stats()
	fmt.Println("dead engine:", e.Engine, "dropped:", st.Dropped.Total(), "messages:", st.Messages)
	// Output:
	// engine 1: req-1 [11 12]
	// dead engine: 1 dropped: 1 messages: 1
}
