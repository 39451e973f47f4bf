package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// The socket types the peers dial as, in one place.
type socketType = zmtpguard.SocketType

const (
	typeXSub = "XSUB"
	typePush = "PUSH"
)

// dial connects a raw ZMTP peer of type t to endpoint tcp://host:port.
func dial(ctx context.Context, ep string, t socketType) (*zmtpguard.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return zmtpguard.Dial(dctx, "tcp", strings.TrimPrefix(ep, "tcp://"), t, nil, nil)
}

// awaitReady reads c until READY, closing it if that takes longer than d.
func awaitReady(c *zmtpguard.Conn, d time.Duration) error {
	t := time.AfterFunc(d, func() { c.Close() })
	defer t.Stop()
	for {
		var m zmtpguard.Message
		if err := c.ReadMessage(&m); err != nil {
			return fmt.Errorf("no READY within %v: %w", d, err)
		}
		if m.Command == "" && len(m.Frames) == 1 && string(m.Frames[0]) == dpwire.ReadyFrame {
			return nil
		}
	}
}

func send(c *zmtpguard.Conn, frames ...[]byte) error {
	if err := c.WriteMessage(frames...); err != nil {
		return err
	}
	return c.Flush()
}

// engineStats is the EngineCoreOutputs the engine pushes: engine 0, one
// running request, waiting = ms (the send time), step_counter = step. The
// one call into the project's encoder, so that a rename touches one line.
func engineStats(dst []byte, ms, step int64) []byte {
	return dpwire.AppendHeader(dst, &enginecore.Header{EngineIndex: 0, HasStats: true,
		Stats: enginecore.SchedulerStats{NumRunningReqs: 1, NumWaitingReqs: ms, StepCounter: step}})
}

// sample is one stats publication the front-end saw.
type sample struct {
	at  time.Duration // since the run started
	age time.Duration // at minus the send time of the stats it carries
}

// parseStats returns engine 0's waiting count of a stats publication
// ([[[waiting, running, ...], ...], wave, running]); ok is false for a wave
// publication ([nil, wave, running]) or anything else.
func parseStats(b []byte) (int64, bool) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 3 || msgp.IsNil(b) {
		return 0, false
	}
	n, b, err = msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 1 {
		return 0, false
	}
	n, b, err = msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 1 {
		return 0, false
	}
	w, _, err := msgp.ReadInt64Bytes(b)
	return w, err == nil
}
