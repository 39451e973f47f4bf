// Command rawtcp is the ceiling the ZeroMQ receivers are compared with: a
// plain Go TCP receiver that does the minimum a ZMTP PULL must (greeting and
// READY, unchecked), then reads length-prefixed frames through a
// bufio.Reader as large as a zmqguard socket's largest read buffer (256 KiB,
// so both make the same read syscalls) into one reused buffer and counts
// messages. No guard, no socket layer, no decode, no goroutine hand-off.
//
// Usage:
//
//	rawtcp --bind tcp://127.0.0.1:0 --count N
//
// Once bound, it writes "bound endpoint=tcp://127.0.0.1:PORT" on stderr with
// the port the kernel chose (bench/run.sh reads it; load.Bound).
//
// It accepts one connection, exits after N messages and prints one JSON line
// (msgs/s from the first to the last message, allocations per message).
package main

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"net"
	"os"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

func main() {
	bind := flag.String("bind", "", "endpoint to listen on, tcp://host:port (required)")
	count := flag.Uint64("count", 1_000_000, "messages to receive")
	bufSize := flag.Int("buffer", 256<<10, "read buffer size (default: zmqguard socket's largest read buffer, 256 KiB: socket.Options.Guard.ReadBufferSize)")
	flag.Parse()
	if *bind == "" || *count < 2 {
		flag.Usage()
		os.Exit(2)
	}
	addr, err := load.TCPAddr(*bind)
	if err != nil {
		load.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		load.Fatal(err)
	}
	load.Bound("tcp://" + ln.Addr().String())
	nc, err := ln.Accept()
	ln.Close()
	if err != nil {
		load.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReaderSize(nc, *bufSize)
	if err := handshake(nc, br); err != nil {
		load.Fatal(err)
	}
	var m load.Meter
	buf := make([]byte, 0, 4096)
	for m.N() < *count {
		for {
			flags, size, err := load.ReadFrameHeader(br, 1<<20)
			if err != nil {
				load.Fatal(err)
			}
			if uint64(cap(buf)) < size {
				buf = make([]byte, size)
			}
			buf = buf[:size]
			if _, err := io.ReadFull(br, buf); err != nil {
				load.Fatal(err)
			}
			if flags&zmtpwire.FlagMore == 0 {
				break
			}
		}
		m.Count()
	}
	m.Stop()
	load.PrintJSON(m.Result("rawtcp"))
}

// handshake sends a ZMTP 3.0 NULL greeting and READY as PULL and skips the
// peer's greeting and READY without checking them.
func handshake(nc net.Conn, br *bufio.Reader) error {
	g := zmtpwire.LocalGreeting()
	out := append(g[:], load.ReadyCommand("PULL")...)
	if _, err := nc.Write(out); err != nil {
		return err
	}
	if _, err := br.Discard(zmtpwire.GreetingSize); err != nil {
		return err
	}
	flags, size, err := load.ReadFrameHeader(br, 1<<16)
	if err != nil {
		return err
	}
	if flags&zmtpwire.FlagCommand == 0 {
		return errors.New("expected the peer's READY command")
	}
	_, err = br.Discard(int(size))
	return err
}
