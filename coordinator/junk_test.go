package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// The seed reports' hazards, as frames.
var (
	hazardInvalidUTF8 = []byte{0xa3, 0xe0, 0x80, 0x80}                  // str with invalid UTF-8
	hazardMapKeyMap   = []byte{0x81, 0x80, 0x01}                        // a map keyed by a map
	hazardArrayClaims = []byte{0xdd, 0xff, 0xff, 0xff, 0xff}            // array32 claiming 4G elements
	hazardScannerInt  = []byte{0x45}                                    // "Expected array, got int"
	hazardDeep        = append(bytes.Repeat([]byte{0x91}, 20000), 0x01) // 20,000-deep nesting
)

type reasons = map[decodeguard.Reason]uint64

// predictFront says how the coordinator must account for a frame sent on
// the front publish socket by a front-end: ReasonNone when accepted. ok is
// false for frames the test must not send (a scale notice the state would
// apply and so change the engine count).
func predictFront(b []byte) (r decodeguard.Reason, ok bool) {
	m, err := dpwire.ParseFrontMessage(b)
	if err != nil {
		return decodeguard.ReasonOf(err), true
	}
	switch m.Kind {
	case dpwire.FrontScale:
		if m.Engines > junkMaxEngines {
			return decodeguard.ReasonValidate, true // the state machine's range check
		}
		return 0, false
	case dpwire.FrontWake:
		return 0, true
	}
	return 0, false // (un)subscriptions: an XSUB would not forward them as sent
}

// predictBackOutput does the same for an engine output frame, for a
// coordinator with engines engines.
func predictBackOutput(b []byte, engines int) decodeguard.Reason {
	var m enginecore.Header
	if err := enginecore.DecodeHeader(b, nil, &m); err != nil {
		return decodeguard.ReasonOf(err)
	}
	switch {
	case m.OutputsLen != 0, m.HasUtilityOutput:
		return decodeguard.ReasonValidate
	case m.Validate() != nil:
		return decodeguard.ReasonOf(m.Validate())
	case m.EngineIndex >= junkMaxEngines, m.HasStats && m.EngineIndex >= int64(engines):
		return decodeguard.ReasonUnknownRank
	// The wave-jump rule, at wave 0 (the junk test starts no wave; a run of
	// waveResync such random notices in a row is not expected).
	case m.HasWaveComplete && m.WaveComplete+1 > maxWaveJump, !m.HasWaveComplete && m.HasStartWave && m.StartWave > maxWaveJump:
		return decodeguard.ReasonValidate
	}
	return decodeguard.ReasonNone
}

// junkMaxEngines is the default engine bound of the junk test's
// two-engine coordinator (StateConfig.MaxEngines zero).
const junkMaxEngines = max(defaultScaleFactor*2, defaultMinMaxEngines)

// TestJunkOnEverySocket sends the seeds' hazards, malformed shapes, random
// frames and raw TCP probes to all three sockets of a running coordinator
// while two valid engines keep sending stats: every junk frame is counted
// under exactly one reason, the probes as connection violations, and valid
// stats still reach the front-end.
func TestJunkOnEverySocket(t *testing.T) {
	ctx := testCtx(t, 45*time.Second)
	cfg := testConfig(2)
	cfg.Socket.Guard.HandshakeTimeout = 300 * time.Millisecond
	h := startCoordinator(t, cfg)
	f := dialFront(t, h)
	es := readyEngines(t, ctx, h, 2)
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}}, nil)

	// The valid engines keep reporting, steps increasing.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stepMu sync.Mutex
	steps := [2]int{}
	for i, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				stepMu.Lock()
				steps[i]++
				step := steps[i]
				stepMu.Unlock()
				if err := e.SendStats(ctx, i, 1+step%50, 1, 0, step); err != nil {
					t.Errorf("engine %d: %v", i, err)
					return
				}
			}
		}()
	}
	stopped := false
	stopEngines := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopEngines()

	front := junkXSub(t, ctx, h.c.FrontEndpoint())
	backPub := junkXSub(t, ctx, h.c.BackPublishEndpoint())
	backOut := junkPush(t, h.c.BackOutputEndpoint())
	send := func(s interface {
		Send(context.Context, ...[]byte) error
	}, frames ...[]byte) {
		t.Helper()
		if err := s.Send(ctx, frames...); err != nil {
			t.Fatal(err)
		}
	}

	// Phase 1: the hazards, with the reasons they must be counted under.
	hazards := [][]byte{hazardInvalidUTF8, hazardMapKeyMap, hazardArrayClaims, hazardScannerInt, hazardDeep}
	for _, b := range hazards {
		send(front, b)
		send(backPub, b)
		send(backOut, b)
	}
	send(front, []byte{0x92, 0xc0}, []byte{0x07})                   // two frames
	send(front, dpwire.AppendScaleElasticEP(nil, junkMaxEngines+1)) // parses, refused by the state machine
	send(front, []byte{0x93, 0xc0, 0x07, 0x07})                     // wrong arity
	send(front, []byte{0x92, 0xc0, 0xff})                           // negative wave
	send(backPub, []byte("\x01probe"))                              // a subscription to a topic
	send(backPub, []byte{0x01}, []byte("x"))                        // two frames
	send(backOut, []byte{})                                         // empty frame
	send(backOut, []byte{0x91, 0x00}, []byte{0x90})                 // two frames
	send(backOut, dpwire.AppendHeader(nil, &enginecore.Header{EngineIndex: 7, HasStats: true, Timestamp: ts}))
	send(backOut, dpwire.AppendHeader(nil, &enginecore.Header{EngineIndex: 1, HasStartWave: true, StartWave: -3}))

	wantFront := reasons{decodeguard.ReasonDecode: 5, decodeguard.ReasonOversize: 1, decodeguard.ReasonEnvelope: 1, decodeguard.ReasonValidate: 2}
	wantPub := reasons{decodeguard.ReasonDecode: 5, decodeguard.ReasonValidate: 1, decodeguard.ReasonEnvelope: 1}
	wantOut := reasons{decodeguard.ReasonDecode: 5, decodeguard.ReasonOversize: 1, decodeguard.ReasonEnvelope: 1,
		decodeguard.ReasonUnknownRank: 1, decodeguard.ReasonValidate: 1}
	checkDrops := func(phase string) {
		t.Helper()
		var st Stats
		ok := func() bool {
			st = h.c.Stats()
			return sameDrops(st.Front.Drops, wantFront) && sameDrops(st.BackPublish.Drops, wantPub) && sameDrops(st.BackOutput.Drops, wantOut)
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for !ok() {
			select {
			case <-wctx.Done():
				t.Fatalf("%s: drops\n front %v want %v\n back publish %v want %v\n back output %v want %v",
					phase, dropsOf(st.Front.Drops), wantFront, dropsOf(st.BackPublish.Drops), wantPub,
					dropsOf(st.BackOutput.Drops), wantOut)
			case <-tick.C:
			}
		}
	}
	checkDrops("hazards")

	// Phase 2: random frames, each predicted with the package's own
	// decoders and the state machine's rules.
	rng := rand.New(rand.NewPCG(7, 11))
	random := func() []byte {
		b := make([]byte, 1+rng.IntN(48))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		if rng.IntN(2) == 0 { // often start like a real message
			b[0] = 0x90 + byte(rng.IntN(10))
		}
		return b
	}
	const perSocket = 300
	for sent := 0; sent < perSocket; {
		b := random()
		if b[0] <= 0x01 { // an XSUB sends these as subscriptions
			continue
		}
		r, ok := predictFront(b)
		if !ok {
			continue
		}
		send(front, b)
		if r != decodeguard.ReasonNone {
			wantFront[r]++
		}
		sent++
	}
	for sent := 0; sent < perSocket; sent++ {
		b := random()
		if b[0] <= 0x01 {
			b[0] = 0x45
		}
		send(backPub, b)
		wantPub[decodeguard.ReasonDecode]++
	}
	for sent := 0; sent < perSocket; sent++ {
		b := random()
		send(backOut, b)
		if r := predictBackOutput(b, 2); r != decodeguard.ReasonNone {
			wantOut[r]++
		}
	}
	checkDrops("random frames")

	// Phase 3: raw TCP probes on every port: an HTTP request, a TLS
	// ClientHello, a bare half ZMTP greeting left hanging.
	probes := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: coordinator\r\n\r\n"),
		{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03},
		{0xff, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x7f},
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, ep := range []string{h.c.FrontEndpoint(), h.c.BackOutputEndpoint(), h.c.BackPublishEndpoint()} {
		for _, p := range probes {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(ep, "tcp://"))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll.WaitForCtx(t, ctx, "every probe to be refused", func() bool {
		st := h.c.Stats()
		return st.Front.Refused.Total() == 3 && st.BackOutput.Refused.Total() == 3 && st.BackPublish.Refused.Total() == 3
	})

	// Valid stats still arrive, and nothing was counted twice.
	stopEngines()
	if err := es[0].SendStats(ctx, 0, 777, 7, 1, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := es[1].SendStats(ctx, 1, 778, 8, 1, 1<<20); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h, f, [][2]int{{777, 7}, {778, 8}}, nil)
	checkDrops("final")
	st := h.c.Stats()
	if st.Refused.Total() != 9 || st.Dropped != st.Front.Dropped+st.BackOutput.Dropped+st.BackPublish.Dropped {
		t.Fatalf("totals %+v", st)
	}
	for name, ss := range map[string]SocketStats{"front": st.Front, "back output": st.BackOutput, "back publish": st.BackPublish} {
		if ss.Accepted+ss.Dropped != ss.Received {
			t.Errorf("%s: accepted %d + dropped %d != received %d", name, ss.Accepted, ss.Dropped, ss.Received)
		}
	}
	line, err := json.Marshal(st)
	if err != nil || !bytes.Contains(line, []byte(`"drops":{"`)) || !bytes.Contains(line, []byte(`"refused":{"`)) {
		t.Fatalf("JSON %s: %v", line, err)
	}
	t.Logf("junk accounted: %d dropped (%v), %d connections refused; %d stats applied", st.Dropped, dropsOf(st.Drops), st.Refused.Total(), st.StatsApplied)
}
