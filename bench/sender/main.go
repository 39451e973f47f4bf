// Command sender is the benchmark load generator for receive loops: it
// connects to a ZeroMQ PULL endpoint as a PUSH (guarded ZMTP handshake
// through zmtpguard), then writes ready-made frames in large chunks straight
// to the TCP connection, so that the receiver, not the sender, is the limit.
//
// Usage:
//
//	sender --connect tcp://127.0.0.1:PORT --count N [--size 100 | --stats] [--junk] [--chunk 65536]
//
// --stats sends the 101-byte vLLM stats vector (load.StatsVector); --size
// sends frames of that many bytes. --junk follows every valid frame with a
// junk frame (alternately "45" and "a3e08080"), so that half of the frames
// are junk; --count counts valid frames. After the last byte it half-closes
// the connection and waits for the receiver to close its side, then prints
// one JSON line: frames and bytes sent and the rate it sent them at.
//
// --kvevents connects as a PUB instead and sends live KV-event messages
// [topic, seq, payload] (load.KVBatch, seq numbered from 0), for a bound
// SUB: kvevents.Subscriber with Source.Bind, or bench/py/sub.py. With
// --connect-file it connects as a PUB to every endpoint listed in that file
// (one a line; it waits for the file to appear), as a fleet of engines
// would, and spreads --count messages over them, a few at a time to each in
// turn, every connection with its own sequence.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

type report struct {
	Program      string  `json:"program"`
	Frames       uint64  `json:"frames"`
	Valid        uint64  `json:"valid"`
	Bytes        uint64  `json:"bytes"`
	Seconds      float64 `json:"seconds"`
	FramesPerSec float64 `json:"frames_per_sec"`
	Note         string  `json:"note,omitempty"`
}

func main() {
	connect := flag.String("connect", "", "endpoint of the receiving PULL, tcp://host:port (required)")
	count := flag.Uint64("count", 1_000_000, "valid frames to send")
	size := flag.Int("size", 100, "frame body size in bytes (ignored with --stats)")
	stats := flag.Bool("stats", false, "send the 101-byte vLLM stats vector")
	junk := flag.Bool("junk", false, "follow every valid frame with a junk frame")
	curveDir := flag.String("curve", "", "speak CURVE as a client: a `dir` with server.key (the server's public certificate) and clients/client.key_secret; every message is encrypted and written through the connection")
	outputs := flag.Bool("outputs", false, "send 157-frame EngineCoreOutputs messages (256 outputs, logprobs in aux frames); --count counts messages")
	kv := flag.Bool("kvevents", false, "connect as a PUB and send live KV-event messages [topic, seq, payload] (load.KVBatch, seq from 0); --count counts messages")
	topic := flag.String("topic", "", "the topic frame of --kvevents messages")
	connectFile := flag.String("connect-file", "", "with --kvevents: a file listing the endpoints to connect to, one a line (replaces --connect)")
	chunk := flag.Int("chunk", 64<<10, "bytes per write")
	wait := flag.Duration("wait", 20*time.Second, "how long to retry connecting while the receiver starts")
	linger := flag.Duration("linger", 2*time.Minute, "how long to wait for the receiver to close after the last byte")
	flag.Parse()
	if *kv && *connectFile != "" {
		sendKVFleet(*connectFile, *topic, *count, *wait, *linger)
		return
	}
	if *connect == "" || *count == 0 || (*size <= 0 && !*stats) || *chunk <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *outputs && *junk {
		fmt.Fprintln(os.Stderr, "sender: --outputs and --junk do not combine")
		os.Exit(2)
	}
	body := load.Body(*size)
	if *stats {
		body = load.Body(0)
	}
	group := [][]byte{body}
	if *junk {
		j := load.Junk()
		group = [][]byte{body, j[0], body, j[1]}
	}
	validPerGroup := uint64(1)
	if *junk {
		validPerGroup = 2
	}
	groups := (*count + validPerGroup - 1) / validPerGroup
	per := uint64(load.GroupsPerChunk(group, *chunk))
	full := load.Chunk(group, int(per))
	chunkOf := func(n int) []byte { return load.Chunk(group, n) }
	framesPerGroup := uint64(len(group))
	if *outputs {
		msg := load.OutputsMessage()
		per = uint64(max(1, *chunk/len(load.ChunkMultipart(msg, 1))))
		full = load.ChunkMultipart(msg, int(per))
		chunkOf = func(n int) []byte { return load.ChunkMultipart(msg, n) }
		framesPerGroup = uint64(len(msg))
	}

	if *curveDir != "" {
		if *junk {
			fmt.Fprintln(os.Stderr, "sender: --curve and --junk do not combine")
			os.Exit(2)
		}
		sendCurve(*connect, *curveDir, *count, *wait, *linger, *outputs, body)
		return
	}
	if *kv {
		if *junk || *outputs || *curveDir != "" {
			fmt.Fprintln(os.Stderr, "sender: --kvevents combines with no other payload flag")
			os.Exit(2)
		}
		sendKV(*connect, *topic, *count, *chunk, *wait, *linger)
		return
	}
	c, err := load.DialRetry(*connect, "PUSH", *wait)
	if err != nil {
		load.Fatal(err)
	}
	nc := c.NetConn()
	rep := report{Program: "sender"}
	start := time.Now()
	for left := groups; left > 0; {
		buf := full
		if left < per {
			buf = chunkOf(int(left))
		}
		n := min(left, per)
		if _, err := nc.Write(buf); err != nil {
			rep.Note = "receiver closed early: " + err.Error()
			break
		}
		left -= n
		rep.Frames += n * framesPerGroup
		rep.Valid += n * validPerGroup
		rep.Bytes += uint64(len(buf))
	}
	elapsed := time.Since(start)
	rep.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		rep.FramesPerSec = float64(rep.Frames) / elapsed.Seconds()
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(*linger))
	io.Copy(io.Discard, nc)
	c.Close()
	load.PrintJSON(rep)
}

// sendCurve is the CURVE sender: the handshake as a CURVE client, then
// count messages (the stats vector or the outputs message) through the
// connection's encrypting writer, flushed every 64 messages.
func sendCurve(connect, dir string, count uint64, wait, linger time.Duration, outputs bool, body []byte) {
	serverPublic, _, err := zmtpguard.LoadCertificate(filepath.Join(dir, "server.key"))
	if err != nil {
		load.Fatal(err)
	}
	_, clientSecret, err := zmtpguard.LoadCertificate(filepath.Join(dir, "clients", "client.key_secret"))
	if err != nil {
		load.Fatal(err)
	}
	cfg := &zmtpguard.Config{Curve: &zmtpguard.CurveConfig{SecretKey: clientSecret, ServerKey: serverPublic}}
	c, err := load.DialRetryConfig(connect, "PUSH", wait, cfg)
	if err != nil {
		load.Fatal(err)
	}
	msg := [][]byte{body}
	if outputs {
		msg = load.OutputsMessage()
	}
	rep := report{Program: "sender"}
	start := time.Now()
	for i := uint64(0); i < count; i++ {
		if err := c.WriteMessage(msg...); err != nil {
			rep.Note = "receiver closed early: " + err.Error()
			break
		}
		if i%64 == 63 || i == count-1 {
			if err := c.Flush(); err != nil {
				rep.Note = "receiver closed early: " + err.Error()
				break
			}
		}
		rep.Frames += uint64(len(msg))
		rep.Valid++
	}
	elapsed := time.Since(start)
	rep.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		rep.FramesPerSec = float64(rep.Frames) / elapsed.Seconds()
	}
	nc := c.NetConn()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(linger))
	io.Copy(io.Discard, nc)
	c.Close()
	load.PrintJSON(rep)
}

// sendKV is the KV-event publisher: a guarded ZMTP connection announcing
// PUB (to a bound SUB, as vLLM's publisher connects when its endpoint names
// a host), then count live messages [topic, seq, payload] with seq 0, 1, ...,
// written in chunks renumbered before each write. What the subscriber sends
// (its subscription) is read only at the end.
func sendKV(connect, topic string, count uint64, chunk int, wait, linger time.Duration) {
	payload := load.KVBatch()
	one, _ := load.KVChunk(topic, payload, 1)
	per := uint64(max(1, chunk/len(one)))
	c, err := load.DialRetry(connect, "PUB", wait)
	if err != nil {
		load.Fatal(err)
	}
	nc := c.NetConn()
	rep := report{Program: "sender"}
	full, fullAt := load.KVChunk(topic, payload, int(per))
	var seq uint64
	start := time.Now()
	for left := count; left > 0; {
		buf, at := full, fullAt
		if left < per {
			buf, at = load.KVChunk(topic, payload, int(left))
		}
		seq = load.SetSeqs(buf, at, seq)
		n := uint64(len(at))
		if _, err := nc.Write(buf); err != nil {
			rep.Note = "receiver closed early: " + err.Error()
			break
		}
		left -= n
		rep.Frames += 3 * n
		rep.Valid += n
		rep.Bytes += uint64(len(buf))
	}
	elapsed := time.Since(start)
	rep.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		rep.FramesPerSec = float64(rep.Frames) / elapsed.Seconds()
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(linger))
	io.Copy(io.Discard, nc)
	c.Close()
	load.PrintJSON(rep)
}

// sendKVFleet is sendKV to every endpoint listed in file: it connects to
// all of them, then writes fleetBurst messages to each in turn, each
// connection numbering its own messages from 0, until count messages are
// written in all.
func sendKVFleet(file, topic string, count uint64, wait, linger time.Duration) {
	const fleetBurst = 4
	var eps []string
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile(file)
		if err == nil {
			eps = strings.Fields(string(b))
			break
		}
		if time.Now().After(deadline) {
			load.Fatal(fmt.Errorf("no endpoint file %s after %v: %w", file, wait, err))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(eps) == 0 {
		load.Fatal(fmt.Errorf("%s lists no endpoint", file))
	}
	conns := make([]net.Conn, len(eps))
	zconns := make([]*zmtpguard.Conn, len(eps))
	left := make([]uint64, len(eps))
	seqs := make([]uint64, len(eps))
	// Dial 64 at a time: the receiver drops a connection that stays
	// silent past its heartbeat timeout (8 s by default), and this writer
	// answers no heartbeat, so every connection must start receiving
	// batches soon after it is made.
	var (
		dialWG  sync.WaitGroup
		dialErr error
		dialMu  sync.Mutex
		gate    = make(chan struct{}, 64)
	)
	for i, ep := range eps {
		dialWG.Add(1)
		gate <- struct{}{}
		go func() {
			defer func() { <-gate; dialWG.Done() }()
			c, err := load.DialRetry(ep, "PUB", wait)
			dialMu.Lock()
			defer dialMu.Unlock()
			if err != nil {
				dialErr = err
				return
			}
			zconns[i] = c
		}()
		left[i] = count / uint64(len(eps))
		if uint64(i) < count%uint64(len(eps)) {
			left[i]++
		}
	}
	dialWG.Wait()
	if dialErr != nil {
		load.Fatal(dialErr)
	}
	for i, c := range zconns {
		defer c.Close()
		conns[i] = c.NetConn()
	}
	payload := load.KVBatch()
	burst, burstAt := load.KVChunk(topic, payload, fleetBurst)
	rep := report{Program: "sender", Note: fmt.Sprintf("%d connections", len(conns))}
	start := time.Now()
	for sent := uint64(0); sent < count; {
		for i, nc := range conns {
			if left[i] == 0 {
				continue
			}
			buf, at := burst, burstAt
			if left[i] < fleetBurst {
				buf, at = load.KVChunk(topic, payload, int(left[i]))
			}
			seqs[i] = load.SetSeqs(buf, at, seqs[i])
			if _, err := nc.Write(buf); err != nil {
				load.Fatal(fmt.Errorf("connection %d: %w", i, err))
			}
			n := uint64(len(at))
			left[i] -= n
			sent += n
			rep.Frames += 3 * n
			rep.Valid += n
			rep.Bytes += uint64(len(buf))
		}
	}
	elapsed := time.Since(start)
	rep.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		rep.FramesPerSec = float64(rep.Frames) / elapsed.Seconds()
	}
	// Half-close every connection, then wait for the receiver to close.
	var wg sync.WaitGroup
	for _, nc := range conns {
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetReadDeadline(time.Now().Add(linger))
			io.Copy(io.Discard, nc)
		}()
	}
	wg.Wait()
	load.PrintJSON(rep)
}
