package loop

import (
	"context"

	"github.com/zmqguard/zmqguard/socket"
)

// Receiver is what a Loop receives from: zmqguard's *socket.Socket
// satisfies it, socket.FromZMQ4 adapts any zmq4.Socket, and tests can feed
// a Loop from a channel.
//
// Recv blocks until a message arrives or ctx ends. It returns ctx's error
// when ctx ends, an error matching net.ErrClosed or socket.ErrClosed once
// the receiver is closed (the Loop then stops), a classified *decodeguard.Error when the receiver
// itself refused a message or lost one peer's connection (counted as a
// drop), or another error, which surfaces from Run. The frames of the returned message may be reused by
// the next Recv.
//
// A Receiver may tell a Loop more through optional methods, found by
// interface assertion as net/http finds an http.Flusher (a *socket.Socket
// has both; a type that embeds one keeps them):
//
//   - Options() socket.Options: the receiver enforces
//     Options().Guard.MaxMessageSize before Recv returns a message, so New
//     takes it as Config.MaxMessageSize's default, refuses a larger
//     Config.MaxMessageSize, and skips its own size check when the two are
//     equal.
//   - Stats() socket.Stats: Loop.Stats reports its Refused counts (what
//     the receiver refused before a message reached the loop) in
//     Stats.Refused.
type Receiver interface {
	Recv(ctx context.Context) (socket.Msg, error)
}

// sizeLimited is the optional interface of a Receiver that enforces a
// message size limit itself (see Receiver).
type sizeLimited interface {
	Options() socket.Options
}

// refusalCounting is the optional interface of a Receiver that counts the
// messages and connections it refused (see Receiver).
type refusalCounting interface {
	Stats() socket.Stats
}
