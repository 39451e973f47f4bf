// Package dppeer holds Go reference peers of vLLM's data-parallel
// coordinator: an [Engine] (the engine core's side: subscribe, wait for
// READY, push stats and wave notices, receive START_DP_WAVE) and a
// [FrontEnd] (an API server's side: read publications, send wake-ups and
// scale notices). Tests, the CLI, benchmarks and examples drive a
// coordinator with them; they speak the wire of package dpwire.
//
//	eng, err := dppeer.DialEngine(dppeer.EngineConfig{BackPublish: pub, BackOutput: out})
//	defer eng.Close()
//	err = eng.WaitReady(ctx)
//	err = eng.SendStats(ctx, 0, 5, 3, 0, 1)
package dppeer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/socket"
)

// ErrNotConnected is returned by a [FrontEnd]'s Wake and Scale while it has
// no connection to the coordinator (an XSUB drops messages it has nowhere to
// send).
var ErrNotConnected = errors.New("dppeer: front-end not connected to the coordinator")

// maxPendingWaves bounds the START_DP_WAVE broadcasts an [Engine] keeps
// while WaitReady waits; older ones are discarded.
const maxPendingWaves = 1024

// epoch is the origin of the timestamps the peer helpers put in
// enginecore.Header (vLLM sends time.monotonic(); any monotonic seconds do).
var epoch = time.Now()

func monotonicSeconds() float64 { return 1000 + time.Since(epoch).Seconds() }

// EngineConfig configures an [Engine].
type EngineConfig struct {
	// BackPublish is the coordinator's back publish endpoint (the engine's
	// XSUB dials it); BackOutput its back output endpoint (the engine's
	// PUSH dials it).
	BackPublish string
	BackOutput  string
	// Socket holds the options of both sockets.
	Socket socket.Options
}

// Engine is the coordinator-facing side of a vLLM DP engine core, for
// tests, examples and Go programs: it subscribes on the coordinator's back
// publish socket, waits for READY, pushes enginecore.Header (stats and wave
// notices) to the back output socket and receives START_DP_WAVE broadcasts.
//
// Sends may be called from any goroutine; WaitReady and NextStartWave from
// one goroutine at a time.
type Engine struct {
	sub, push *socket.Socket

	sendMu sync.Mutex
	buf    []byte

	recvMu  sync.Mutex
	readies int                  // READY messages received and not yet consumed by WaitReady
	waves   []dpwire.StartDPWave // START_DP_WAVE broadcasts received by WaitReady
	skipped uint64
}

// DialEngine creates the engine's sockets and connects them in the
// background: the XSUB subscribes to everything ("\x01") as soon as it
// reaches the coordinator, as vLLM's engines do. Call WaitReady next.
func DialEngine(cfg EngineConfig) (*Engine, error) {
	sub, err := socket.New("XSUB", cfg.Socket)
	if err != nil {
		return nil, err
	}
	push, err := socket.New("PUSH", cfg.Socket)
	if err != nil {
		sub.Close()
		return nil, err
	}
	e := &Engine{sub: sub, push: push}
	if err := sub.Subscribe(nil); err != nil {
		e.Close()
		return nil, err
	}
	if err := sub.Dial(cfg.BackPublish); err != nil {
		e.Close()
		return nil, fmt.Errorf("coordinator: engine: dial back publish: %w", err)
	}
	if err := push.Dial(cfg.BackOutput); err != nil {
		e.Close()
		return nil, fmt.Errorf("coordinator: engine: dial back output: %w", err)
	}
	return e, nil
}

// Close closes both sockets.
func (e *Engine) Close() error {
	return errors.Join(e.sub.Close(), e.push.Close())
}

// Skipped counts messages received from the back publish socket that were
// neither READY nor START_DP_WAVE.
func (e *Engine) Skipped() uint64 {
	e.recvMu.Lock()
	defer e.recvMu.Unlock()
	return e.skipped
}

// recv returns the next READY (ready true) or START_DP_WAVE broadcast.
func (e *Engine) recv(ctx context.Context) (ready bool, sw dpwire.StartDPWave, err error) {
	for {
		msg, err := e.sub.Recv(ctx)
		if err != nil {
			return false, dpwire.StartDPWave{}, err
		}
		f := msg.Frames
		switch {
		case len(f) == 1 && string(f[0]) == dpwire.ReadyFrame:
			return true, dpwire.StartDPWave{}, nil
		case len(f) == 2 && string(f[0]) == dpwire.StartDPWaveFrame:
			sw, err := dpwire.ParseStartDPWave(f[1])
			return false, sw, err
		}
		e.skipped++
	}
}

// WaitReady waits for the coordinator's READY, which it sends once every
// engine has subscribed (and again whenever an engine re-subscribes).
// START_DP_WAVE broadcasts received meanwhile are kept for NextStartWave.
func (e *Engine) WaitReady(ctx context.Context) error {
	e.recvMu.Lock()
	defer e.recvMu.Unlock()
	if e.readies > 0 {
		e.readies--
		return nil
	}
	for {
		ready, sw, err := e.recv(ctx)
		if err != nil {
			return err
		}
		if ready {
			return nil
		}
		if len(e.waves) == maxPendingWaves {
			e.waves = append(e.waves[:0], e.waves[1:]...)
		}
		e.waves = append(e.waves, sw)
	}
}

// NextStartWave returns the next START_DP_WAVE broadcast: the wave to start
// and the engine left out (nil when none). When the coordinator forwarded a
// front-end's 2-byte identity (as vLLM's does), exclude is the index that
// identity encodes; vLLM's engines compare the identity with their int
// index and so never skip such a wave. READY messages received
// meanwhile are kept for WaitReady. A malformed broadcast yields a
// classified error.
func (e *Engine) NextStartWave(ctx context.Context) (wave int, exclude *int, err error) {
	e.recvMu.Lock()
	defer e.recvMu.Unlock()
	var sw dpwire.StartDPWave
	if len(e.waves) > 0 {
		sw = e.waves[0]
		e.waves = append(e.waves[:0], e.waves[1:]...)
	} else {
		for {
			var ready bool
			ready, sw, err = e.recv(ctx)
			if err != nil {
				return 0, nil, err
			}
			if !ready {
				break
			}
			e.readies++
		}
	}
	if sw.HasExclude {
		x := int(sw.Exclude)
		exclude = &x
	}
	return int(sw.Wave), exclude, nil
}

// SendOutputs pushes m to the coordinator, encoded as vLLM's engine core
// encodes enginecore.Header (see [dpwire.AppendHeader]). A zero
// Timestamp is replaced by a monotonic clock reading, as vLLM stamps every
// message. It waits (honouring ctx) while the coordinator is not connected
// or its queue is full.
func (e *Engine) SendOutputs(ctx context.Context, m *enginecore.Header) error {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	ts := m.Timestamp
	if ts == 0 {
		ts = monotonicSeconds()
	}
	mm := *m
	mm.Timestamp = ts
	e.buf = dpwire.AppendHeader(e.buf[:0], &mm)
	return e.push.Send(ctx, e.buf)
}

// SendStats pushes the scheduler stats of engine index: its waiting and
// running queue lengths at step step of wave wave.
func (e *Engine) SendStats(ctx context.Context, index, waiting, running, wave, step int) error {
	return e.SendOutputs(ctx, &enginecore.Header{
		EngineIndex: int64(index),
		HasStats:    true,
		Stats: enginecore.SchedulerStats{
			NumWaitingReqs: int64(waiting),
			NumRunningReqs: int64(running),
			CurrentWave:    int64(wave),
			StepCounter:    int64(step),
		},
	})
}

// SendWaveComplete pushes the notice rank 0 sends when the engines have
// paused at the end of wave: wave_complete = wave.
func (e *Engine) SendWaveComplete(ctx context.Context, index, wave int) error {
	return e.SendOutputs(ctx, &enginecore.Header{EngineIndex: int64(index), HasWaveComplete: true, WaveComplete: int64(wave)})
}

// SendStartWave pushes the notice an engine sends when it got a request for
// wave while paused or behind: start_wave = wave.
func (e *Engine) SendStartWave(ctx context.Context, index, wave int) error {
	return e.SendOutputs(ctx, &enginecore.Header{EngineIndex: int64(index), HasStartWave: true, StartWave: int64(wave)})
}

// FrontEndConfig configures a [FrontEnd].
type FrontEndConfig struct {
	// Front is the coordinator's front publish endpoint.
	Front string
	// Socket holds the XSUB socket's options.
	Socket socket.Options
}

// FrontEnd is the coordinator-facing side of a vLLM API front-end, for
// tests, examples and Go programs: an XSUB subscribed to the coordinator's
// front publish socket that receives the stats and wave publications and
// sends wake-ups and elastic-EP scale notices.
//
// Sends may be called from any goroutine; Next and NextStats from one
// goroutine at a time.
type FrontEnd struct {
	sub *socket.Socket

	sendMu sync.Mutex
	buf    []byte
}

// DialFrontEnd creates the front-end's XSUB, subscribes to everything and
// connects it in the background.
func DialFrontEnd(cfg FrontEndConfig) (*FrontEnd, error) {
	sub, err := socket.New("XSUB", cfg.Socket)
	if err != nil {
		return nil, err
	}
	f := &FrontEnd{sub: sub}
	if err := sub.Subscribe(nil); err != nil {
		sub.Close()
		return nil, err
	}
	if err := sub.Dial(cfg.Front); err != nil {
		sub.Close()
		return nil, fmt.Errorf("coordinator: front-end: dial front publish: %w", err)
	}
	return f, nil
}

// Close closes the socket.
func (f *FrontEnd) Close() error { return f.sub.Close() }

// Connected reports whether the front-end is connected to the coordinator.
func (f *FrontEnd) Connected() bool { return f.sub.Stats().Peers > 0 }

// Next returns the next publication. A malformed one yields a classified
// error (and the next call goes on with the following message).
func (f *FrontEnd) Next(ctx context.Context) (dpwire.Publication, error) {
	msg, err := f.sub.Recv(ctx)
	if err != nil {
		return dpwire.Publication{}, err
	}
	if len(msg.Frames) != 1 {
		return dpwire.Publication{}, errOneFrame
	}
	var p dpwire.Publication
	err = dpwire.ParsePublication(msg.Frames[0], &p)
	return p, err
}

// NextStats returns the next publication as vLLM's front-ends unpack it:
// the [waiting, running] counts per engine (nil for a publication sent at
// a wave change, which carries none), the current wave and whether the
// engines run.
func (f *FrontEnd) NextStats(ctx context.Context) (counts [][2]int, wave int, running bool, err error) {
	p, err := f.Next(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	return p.Counts(), int(p.Wave), p.Running, nil
}

func (f *FrontEnd) send(ctx context.Context, build func([]byte) []byte) error {
	if !f.Connected() {
		return ErrNotConnected
	}
	f.sendMu.Lock()
	defer f.sendMu.Unlock()
	f.buf = build(f.buf[:0])
	return f.sub.Send(ctx, f.buf)
}

// Wake sends (engine_to_exclude, wave), as a front-end does when it sends a
// request for wave while the engines are paused: the coordinator then
// broadcasts START_DP_WAVE to every engine but exclude (nil: all of them).
// The exclusion goes as an int, as vLLM releases before the 2-byte engine
// identities sent it; see WakeIdentity.
func (f *FrontEnd) Wake(ctx context.Context, exclude *int, wave int) error {
	return f.send(ctx, func(b []byte) []byte { return dpwire.AppendWake(b, exclude, wave) })
}

// WakeIdentity sends the wake-up as current vLLM front-ends do, naming the
// excluded engine by its 2-byte little-endian identity.
func (f *FrontEnd) WakeIdentity(ctx context.Context, engine uint16, wave int) error {
	return f.send(ctx, func(b []byte) []byte { return dpwire.AppendWakeIdentity(b, engine, wave) })
}

// Scale sends ("SCALE_ELASTIC_EP", n): the engine count is now n.
func (f *FrontEnd) Scale(ctx context.Context, n int) error {
	return f.send(ctx, func(b []byte) []byte { return dpwire.AppendScaleElasticEP(b, n) })
}

var errOneFrame = decodeguard.NewError(decodeguard.ReasonEnvelope, "coordinator message must be a single frame")

// SendRaw pushes frames to the back output socket as they are, for tests
// that feed the coordinator malformed messages from a subscribed engine.
func (e *Engine) SendRaw(ctx context.Context, frames ...[]byte) error {
	return e.push.Send(ctx, frames...)
}
