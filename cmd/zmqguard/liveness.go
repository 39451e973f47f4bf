package main

import (
	"flag"
	"time"

	"github.com/zmqguard/zmqguard/socket"
)

// livenessFlags are the heartbeat flags every long-running command takes
// (coordinator, handshake-listener, and the engine and front-end helpers).
type livenessFlags struct {
	interval, timeout *time.Duration
}

// addLivenessFlags registers --heartbeat-interval and --heartbeat-timeout
// on fs, defaulting to the socket package's defaults (2 s / 6 s).
func addLivenessFlags(fs *flag.FlagSet) *livenessFlags {
	def := socket.DefaultOptions()
	return &livenessFlags{
		interval: fs.Duration("heartbeat-interval", def.HeartbeatInterval,
			"send a ZMTP PING to a peer silent this long (ZMTP 3.1 peers only: a 3.0 peer such as go-zeromq/zmq4 is never PINGed; 0 turns heartbeats off; peers' PINGs are still answered)"),
		timeout: fs.Duration("heartbeat-timeout", def.HeartbeatTimeout,
			"disconnect a peer still silent this long after our PING (counted as heartbeat_timeouts; never a ZMTP 3.0 peer)"),
	}
}

// check validates the flags.
func (l *livenessFlags) check() error {
	if *l.interval < 0 {
		return badFlag("--heartbeat-interval", *l.interval, "must not be negative")
	}
	if *l.timeout < 0 {
		return badFlag("--heartbeat-timeout", *l.timeout, "must not be negative")
	}
	if *l.interval > 0 && *l.timeout == 0 {
		return usagef("--heartbeat-timeout 0 with --heartbeat-interval %v: want a positive timeout when heartbeats are on", *l.interval)
	}
	return nil
}

// options returns socket options carrying the heartbeat rules (every
// other field zero: the library defaults).
func (l *livenessFlags) options() socket.Options {
	var o socket.Options
	o.HeartbeatInterval = *l.interval
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = -1 // off
	}
	o.HeartbeatTimeout = *l.timeout
	return o
}
