// Package loop provides SafeLoop, the receive loop no peer can end: bad
// input is dropped, counted and logged (rate-limited), and the loop goes on.
//
//	pull, _ := socket.New("PULL", socket.Options{})
//	_ = pull.Bind("tcp://127.0.0.1:5557")
//	l, _ := loop.New(pull, loop.Config[Job]{ // Job: a msgp-generated type
//		Name:   "jobs",
//		Decode: loop.MsgpDecoder[Job](decodeguard.Limits{}),
//		Handler: func(ctx context.Context, d loop.Delivery[Job]) error {
//			return save(d.Value) // d.Value is reused: copy what you keep
//		},
//	})
//	err := l.Run(ctx) // nil when ctx ends; l.Stats().Dropped counts by reason
//
// A [Loop] owns one receiving socket and runs
//
//	receive -> envelope check (optional) -> decode (decodeguard pre-scan +
//	typed decode into a reused T) -> validate (optional) -> handler
//
// so that no peer, however hostile, can end it.
//
// # Drop policy
//
// An error classified as bad input by decodeguard (see
// [decodeguard.IsBadInput]) at any stage drops the message: its reason's
// counter goes up, the OnDrop observer is called, a rate-limited log line
// may be written, and the loop goes on with the next message. Validation
// errors that are not classified count as [decodeguard.ReasonValidate]. A
// handler may return a classified error too (for example
// [decodeguard.ReasonUnknownRank] for a request it cannot serve): it is
// counted as a drop of that reason.
//
// Anything else is a bug or a broken socket and surfaces: Run returns it
// wrapped in an [*Error] that says which loop, which stage and which peer,
// unless Config.OnError is set and returns nil, in which case the loop goes
// on. A panic inside the decode stage (the Decoder and Validate) on hostile
// bytes is recovered at the per-message boundary, counted as
// [decodeguard.ReasonDecoderPanic], logged once per loop with its stack, and
// the message dropped; set Config.PropagateDecoderPanics to let it crash
// instead. A panic in the handler is a bug and propagates out of Run, unless
// Config.RecoverHandlerPanics turns it into a handler error.
//
// # Logging
//
// Drops are logged through a *slog.Logger (nil means slog.Default(): on by
// default), never with raw peer bytes, under the same rules as package
// socket's refusals. The first drop of a reason from a connection (a peer
// address with its port, so peers behind one NAT or on loopback are told
// apart) gets a detail line: the loop's name, the reason, the peer's
// address, the frame count, the message length and a hex prefix of at most
// 32 bytes of the message's last frame (at most 4 such lines per reason
// per interval). Every other drop goes into its
// reason's summary line, at most one per Config.LogInterval (1 s by
// default): the number of drops and of distinct connections, and no single
// peer's address or bytes. A timer writes the summary of a burst that has
// stopped within about one interval, while the loop waits for input. A
// flood of 100,000 junk frames per second therefore writes a handful of
// lines. Exact counts are always in [Loop.Stats]; connections the socket
// refused before any message are in Stats.Refused.
//
// # Aliasing
//
// The loop decodes every message into one value of type T that it owns and
// reuses, and the frames come from the receiver, which may reuse its
// buffers on the next receive (socket.Msg's rule). So everything a
// [Delivery] holds — Msg.Frames, Envelope, Body and *Value, and any slice
// inside *Value that a zero-copy decoder points into the frame — is valid
// only until the handler returns (Run), until Delivery.Done is called
// (Deliver), or until the next call (Next). Copy what must outlive that.
//
// # Modes
//
// [Loop.Run] calls Config.Handler for each valid message in the loop's
// goroutine. [Loop.Deliver] sends each valid message on a channel and waits
// for the consumer's Delivery.Done before receiving the next one, so a
// single goroutine can select over several loops and a timer while each
// loop keeps its own drop policy (at the price of two goroutine hand-offs
// per message). [Loop.Next] returns the next valid message to its caller.
// Only one of them may run at a time on a Loop. None allocates per message
// on the happy path; BENCHMARKS.md compares them with a hand-written loop.
//
// # Shutdown
//
// Run and Deliver return nil when their context is cancelled and
// [ErrLoopClosed] after [Loop.Close], in both cases only after the
// in-flight handler has returned. The loop starts no goroutines of its own.
package loop
