// Command fairshare37 re-measures issue 37's "many addresses" rows from
// outside, on loopback, against a running zmqguard CLI process (see
// run.sh). Every 127.x.y.z address is a distinct source host to the
// listener (Linux routes all of 127/8 to lo):
//
//	fairshare37 pull -addr 127.0.0.1:PORT [-n 4200] [-honest 64] [-new 4]
//	fairshare37 replay -addr 127.0.0.1:PORT [-n 300] [-replays 71]
//	fairshare37 http -addr 127.0.0.1:PORT -mode idle|big ... (see http.go)
//	fairshare37 flood -addr 127.0.0.1:PORT [-big 200] [-for 60s] (see http.go)
//
// pull: an honest host (127.0.0.2) holds -honest working PUSH connections
// (a message every 100 ms each) to a guarded PULL (`zmqguard sink`); then
// -n source addresses (127.1.x.y) open one connection each, complete the
// handshake, answer heartbeats and send nothing; then a new honest host
// (127.0.0.3) opens -new connections and sends one message on each. It
// reports how many honest connections were still open after the attack and
// how many of the new host's were admitted and still open a second later.
//
// replay: -n source addresses open one idle DEALER connection each to
// kv-publish's replay port; then an honest client (127.0.0.3) asks for
// -replays replays, one connection each, 150 ms apart, and counts those
// answered up to the end marker within 5 s.
//
// Each attack is bounded in count and time and prints one JSON line.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fairshare37 pull|replay|http|flood [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "pull":
		err = pull(os.Args[2:])
	case "replay":
		err = replay(os.Args[2:])
	case "http":
		err = httpAttack(os.Args[2:])
	case "flood":
		err = httpFlood(os.Args[2:])
	default:
		err = fmt.Errorf("unknown attack %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fairshare37:", err)
		os.Exit(1)
	}
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// attackAddr is the i-th hostile source address, 127.1.x.y (i < 62,500).
func attackAddr(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250) }

// peer is one guarded client connection; a goroutine reads it, answers the
// server's PINGs and records when it ends.
type peer struct {
	c      *zmtpguard.Conn
	wmu    sync.Mutex
	closed atomic.Bool
	msgs   chan [][]byte // data messages read (nil: dropped)
	done   chan struct{}
}

func dial(ctx context.Context, src, addr string, typ zmtpguard.SocketType, msgs bool) (*peer, error) {
	cfg := &zmtpguard.Config{Dialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}, MaxMessageSize: 64 << 20}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := zmtpguard.Dial(dctx, "tcp", addr, typ, nil, cfg)
	if err != nil {
		return nil, err
	}
	p := &peer{c: c, done: make(chan struct{})}
	if msgs {
		p.msgs = make(chan [][]byte, 1024)
	}
	go p.read()
	return p, nil
}

func (p *peer) read() {
	defer close(p.done)
	defer p.closed.Store(true)
	var m zmtpguard.Message
	for {
		if err := p.c.ReadMessage(&m); err != nil {
			return
		}
		switch {
		case m.Command == "PING":
			ctx := m.Frames[0]
			if len(ctx) >= 2 {
				ctx = ctx[2:]
			}
			p.wmu.Lock()
			p.c.WriteCommand("PONG", ctx[:min(len(ctx), 16)])
			p.c.Flush()
			p.wmu.Unlock()
		case m.Command == "" && p.msgs != nil:
			f := make([][]byte, len(m.Frames))
			for i := range f {
				f[i] = append([]byte(nil), m.Frames[i]...)
			}
			select {
			case p.msgs <- f:
			default:
			}
		}
	}
}

func (p *peer) send(frames ...[]byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.c.NetConn().SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := p.c.WriteMessage(frames...); err != nil {
		return err
	}
	return p.c.Flush()
}

func (p *peer) close() { p.c.Close(); <-p.done }

// openAttack opens one idle connection from each of n addresses and keeps
// those the listener admits; it returns them and how many were refused at
// once.
func openAttack(ctx context.Context, n int, addr string, typ zmtpguard.SocketType) ([]*peer, int) {
	var ps []*peer
	failed := 0
	for i := range n {
		p, err := dial(ctx, attackAddr(i), addr, typ, false)
		if err != nil {
			failed++
			continue
		}
		ps = append(ps, p)
	}
	return ps, failed
}

func countOpen(ps []*peer) int {
	n := 0
	for _, p := range ps {
		if !p.closed.Load() {
			n++
		}
	}
	return n
}

func pull(args []string) error {
	fs := flag.NewFlagSet("pull", flag.ExitOnError)
	addr := fs.String("addr", "", "guarded PULL host:port")
	n := fs.Int("n", 4200, "attacking source addresses, one connection each")
	honest := fs.Int("honest", 64, "working connections of the honest host")
	newConns := fs.Int("new", 4, "connections of the new honest host")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var work []*peer
	for i := range *honest {
		p, err := dial(ctx, "127.0.0.2", *addr, "PUSH", false)
		if err != nil {
			return fmt.Errorf("honest connection %d: %w", i, err)
		}
		work = append(work, p)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range work {
		wg.Add(1)
		go func() { // a message every 100 ms: working
			defer wg.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if p.send([]byte("work")) != nil {
						return
					}
				}
			}
		}()
	}
	start := time.Now()
	attack, failed := openAttack(ctx, *n, *addr, "PUSH")
	setup := time.Since(start)
	time.Sleep(time.Second) // the attack holds; the honest host keeps working
	honestOpen := countOpen(work)

	admitted, served := 0, 0
	var fresh []*peer
	var errs []string
	for range *newConns {
		p, err := dial(ctx, "127.0.0.3", *addr, "PUSH", false)
		if err == nil {
			admitted++
			fresh = append(fresh, p)
			err = p.send([]byte("new"))
		}
		if err != nil && len(errs) < 3 {
			errs = append(errs, err.Error())
		}
	}
	time.Sleep(time.Second)
	served = countOpen(fresh)
	attackOpen := countOpen(attack)
	close(stop)
	wg.Wait()
	for _, ps := range [][]*peer{work, attack, fresh} {
		for _, p := range ps {
			p.close()
		}
	}
	emit(map[string]any{"attack": "pull", "attack_addrs": *n, "attack_established": len(attack), "attack_refused": failed,
		"attack_open_at_end": attackOpen, "setup_s": setup.Seconds(), "honest_conns": *honest, "honest_open_after_attack": honestOpen,
		"new_host_conns": *newConns, "new_host_admitted": admitted, "new_host_open_after_1s": served, "new_host_errors": errs})
	return nil
}

var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func replay(args []string) error {
	fs := flag.NewFlagSet("replay", flag.ExitOnError)
	addr := fs.String("addr", "", "kv-publish replay host:port")
	n := fs.Int("n", 300, "attacking source addresses, one connection each")
	replays := fs.Int("replays", 71, "honest replays")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	attack, failed := openAttack(ctx, *n, *addr, "DEALER")
	setup := time.Since(start)
	served := 0
	var errs []string
	for range *replays {
		err := oneReplay(ctx, *addr)
		if err == nil {
			served++
		} else if len(errs) < 3 {
			errs = append(errs, err.Error())
		}
		time.Sleep(150 * time.Millisecond) // within the publisher's replays per host
	}
	attackOpen := countOpen(attack)
	for _, p := range attack {
		p.close()
	}
	emit(map[string]any{"attack": "replay", "attack_addrs": *n, "attack_established": len(attack), "attack_refused": failed,
		"attack_open_at_end": attackOpen, "setup_s": setup.Seconds(), "honest_replays": *replays, "honest_served": served, "honest_errors": errs})
	return nil
}

// oneReplay asks for a replay from seq 0 on a new connection and waits up
// to 5 s for the end marker.
func oneReplay(ctx context.Context, addr string) error {
	p, err := dial(ctx, "127.0.0.3", addr, "DEALER", true)
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.send(nil, binary.BigEndian.AppendUint64(nil, 0)); err != nil {
		return err
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case f := <-p.msgs:
			for _, x := range f {
				if string(x) == string(endSeq) {
					return nil
				}
			}
		case <-p.done:
			return errors.New("connection closed before the end marker")
		case <-t.C:
			return errors.New("no end marker within 5 s")
		}
	}
}
