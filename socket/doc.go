// Package socket provides zmqguard's hardened ZeroMQ sockets: ROUTER, DEALER,
// REQ, PULL, PUSH, XPUB, SUB and XSUB, speaking ZMTP 3 through go-zeromq/zmq4's
// codec over connections that zmtpguard has checked.
//
// No single peer can crash, wedge or starve a Socket:
//
//   - every connection, accepted ([Socket.Bind]) or dialed ([Socket.Dial]),
//     goes through zmtpguard: handshakes run in their own goroutines under a
//     deadline, frame headers are checked against MaxMessageSize and
//     MaxFrames before anything is allocated, connection counts are capped;
//     a violation closes that connection only, and is counted in
//     [Stats].Violations and reported as an [Event];
//   - each peer has a reader goroutine and a writer goroutine draining a
//     bounded queue (Options.HWM messages, default 1000); no socket-wide
//     lock is held across a blocking write, and Send never waits for one
//     slow peer except where the type's semantics say so (PUSH, DEALER, REQ
//     wait for room on some peer, honouring ctx);
//   - Close stops every goroutine and closes every descriptor.
//
// # Receiving
//
// [Socket.Recv] returns one whole message, or ctx's error, or [ErrClosed]
// once the socket is closed (never an empty message). Readers batch: while a
// connection's read buffer holds more bytes, messages accumulate in a
// recycled batch that is handed to Recv in one channel operation, so the
// steady state costs no allocation and no channel operation per message.
// Batches from different peers interleave in arrival order (fair queueing).
// A message's frames alias the batch's buffers and are valid only until the
// next Recv (see [Msg]). A reader whose batch is not taken waits, and stops
// reading its connection: TCP flow control then slows that peer. So a socket
// that receives must be read: an XPUB (or DEALER) whose Recv is never called
// stops reading its peers once 16 batches wait, and then applies no further
// subscriptions and answers no PINGs. A batch is handed over when the
// connection's read buffer holds no further bytes; if it holds only the
// start of the next message, the batch waits for that message to complete.
//
// # Per-type semantics
//
//   - ROUTER: Recv returns [identity, frames...]. A peer's identity is the
//     one it announced in READY, or, if it announced none, five bytes
//     0x00 + a 32-bit counter (libzmq's form). A second connection announcing
//     an identity already connected is closed (EventRejected, counted as
//     ReasonPolicy) and never takes over the first. Send(ctx, identity,
//     frames...) needs at least two frames ([ErrRouterFrames]); an unknown or
//     departed identity gives an [*UnroutableError] naming it in hex, or a
//     counted drop with Options.RouterDropUnroutable; a full peer queue drops
//     the message for that peer (Stats.DroppedHWM).
//   - DEALER: Send round-robins over peers with room and waits (ctx) when
//     none has; Recv fair-queues.
//   - REQ: Send adds the empty delimiter frame and Recv strips it; a reply
//     without one is dropped (ReasonEnvelope). Send and Recv must alternate
//     ([ErrState]); a reply is taken only from the peer the request went to.
//     [Socket.Reset] abandons a request after a timeout by closing that
//     connection, so a late reply can never answer the next request.
//   - PULL: Recv fair-queues; Send is [ErrNotSupported].
//   - PUSH: Send round-robins over peers with room (one peer gets each
//     message, unlike zmq4's PUSH, which copies it to all) and waits (ctx)
//     when every queue is full or no peer is connected.
//   - XPUB: Recv returns every subscription "\x01topic" and unsubscription
//     "\x00topic" each time it arrives (libzmq's XPUB_VERBOSE), ZMTP 3.1
//     SUBSCRIBE/CANCEL commands converted to that form, plus "\x00topic" for
//     the topics of a departed subscriber that nobody else holds; any other
//     message from a subscriber is returned as data. Send publishes to every
//     subscriber with a topic that prefixes frame 0 and drops (counted) for
//     a subscriber whose queue is full. One subscriber holds at most
//     MaxTopicsPerPeer topics of MaxTopicBytesPerPeer bytes.
//   - SUB: [Socket.Subscribe]/[Socket.Unsubscribe]; Recv returns only
//     messages matching a subscription; Send is [ErrNotSupported].
//   - XSUB: as SUB, but Recv is unfiltered and Send passes "\x01topic" /
//     "\x00topic" as subscriptions and any other message to every publisher.
//
// SUB and XSUB send their subscriptions to every publisher as it connects,
// so they survive reconnects. PING commands are answered with PONG by the
// writer; other commands are never returned as data.
//
// # Endpoints
//
// "tcp://host:port" (Bind accepts host "*" and port 0; [Socket.Endpoint]
// gives the address actually bound) and "ipc://path" (a unix socket).
// Dial returns at once and connects in the background, reconnecting after
// Options.ReconnectMin (100 ms) doubling to ReconnectMax (5 s).
package socket
