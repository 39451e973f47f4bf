// Package socket provides ZeroMQ sockets (ROUTER, DEALER, REQ, PULL, PUSH,
// XPUB, SUB, XSUB) that no single peer can crash, wedge or starve.
//
//	ctx := context.Background()
//	pull, _ := socket.New("PULL", socket.Options{}) // zero fields: defaults
//	defer pull.Close()
//	pull.Bind("tcp://127.0.0.1:0") // port 0: the kernel picks one
//
//	push, _ := socket.New("PUSH", socket.Options{})
//	defer push.Close()
//	push.Dial(pull.Endpoint()) // returns at once, connects in the background
//	push.Send(ctx, []byte("hello"), []byte("world"))
//
//	m, err := pull.Recv(ctx) // m.Frames are valid until the next Recv
//	fmt.Printf("%s %s %v\n", m.Frames[0], m.Frames[1], err)
//
// (The package Example runs the same with every error checked.) The
// sockets speak ZMTP 3 through go-zeromq/zmq4's codec over connections
// that zmtpguard has checked. How no peer can break a Socket:
//
//   - every connection, accepted ([Socket.Bind]) or dialed ([Socket.Dial]),
//     goes through zmtpguard: handshakes run in their own goroutines under a
//     deadline, frame headers are checked against MaxMessageSize and
//     MaxFrames before anything is allocated, connection counts are capped;
//     a violation closes that connection only, and is counted in
//     [Stats].Refused and reported as an [Event];
//   - each peer has a reader goroutine and a writer goroutine draining a
//     bounded queue (Options.HWM messages, default 1000, and
//     Options.SendQueueBytes, default 4 MiB; all queues together at most
//     Options.SendTotalBytes, default 256 MiB, shared fairly: a peer past
//     SendTotalBytes divided by the peers is refused before one within its
//     share, and an XPUB disconnects a subscriber that accepts no bytes for
//     Options.WriteTimeout, 10 s by default, while data waits); no socket-wide
//     lock is held across a blocking write, and Send never waits for one
//     slow peer except where the type's semantics say so (PUSH, DEALER, REQ
//     wait for room on some peer, honouring ctx);
//   - every peer has a liveness rule (see Liveness below): a peer that goes
//     silent (a vanished host, a silent partition, a frozen process whose
//     kernel still ACKs) is disconnected, and a dialer reconnects;
//   - received data in memory is bounded per socket (see Memory below);
//   - Close stops every goroutine and closes every descriptor (it signals and
//     returns; Shutdown also waits for them).
//
// # Memory
//
// Beside the per-message bound (Guard.MaxMessageSize, default 1 MiB) and
// the per-peer HWMs, a socket bounds what all its peers together make it
// hold. Options.MemoryBudget (default 64 MiB, or twice MaxMessageSize if
// more) covers the bodies of messages still arriving and the messages
// waiting for Recv: once it is spent, connections holding more than their
// fair share stop reading (TCP back-pressure, Stats.BudgetStalls), and a
// connection that waited Options.BudgetWait (2 s) closes the largest
// holder if it holds at least its fair share (ReasonPolicy,
// Stats.BudgetEvictions); a connection below its fair share is never
// closed for it. A body must arrive within Guard.BodyTimeout (10 s) of its
// message's first header, so a dribbled body is closed, not held. Send
// queues are bounded apart (SendQueueBytes, SendTotalBytes), so that
// subscribers that never read cannot stop the socket from receiving. Read
// and write buffers start at 4 KiB, grow only while a peer keeps them
// full, and go back to 4 KiB once the peer is idle (a read buffer after one
// to two seconds without a byte between messages). When departed or idle
// connections released Options.ReclaimBytes (8 MiB) of buffers, the socket
// asks the runtime for a collection, so the heap
// returns to its baseline within a second of an attack ending (otherwise
// an idle process keeps it until the runtime's two-minute forced
// collection). XPUB subscriptions are bounded per subscriber
// (10,000 topics and 1 MiB of topic bytes) and per socket
// (Options.XPubMaxTopics, XPubMaxTopicBytes, with the same fair-share
// rule), freed when the subscriber leaves, and indexed by topic: matching
// a publication costs a map lookup per distinct topic length, and a
// departure costs the departing subscriber's own topics, whatever the
// number of topics held by others.
//
// # Liveness
//
// Sockets speak ZMTP 3.1 heartbeats (RFC 37), as libzmq does, with every
// peer whose greeting announces ZMTP 3.1 or later (libzmq: 4.3.4 checked;
// zmqguard itself: the socket's own greeting announces 3.1): a connection
// that has received nothing for Options.HeartbeatInterval (default 2 s) is
// sent a PING carrying Options.HeartbeatTTL (deciseconds) and an 8-byte
// context; any received message counts as life; a peer silent for
// HeartbeatInterval + HeartbeatTimeout (default 6 s), or for the TTL its own
// PINGs announced, is disconnected with a cause matching
// [ErrHeartbeatTimeout], reported as EventDisconnected and counted in
// Stats.HeartbeatTimeouts. PINGs and PONGs are handled by the connection's
// reader whether or not the application calls Recv (see Receiving). TCP
// keepalive (Options.TCPKeepAlive, default 15 s idle, 15 s interval, 9
// probes) is set on accepted and dialed connections as a second line.
// Reconnect delays double from ReconnectMin to ReconnectMax, each spread by
// ReconnectJitter (default ±20 %), so that many dialers losing one server
// do not come back in lock-step.
//
// A peer whose greeting announces ZMTP 3.0 (go-zeromq/zmq4 v0.17 does) does
// not know PING: it would hand one to its application as a data message and
// never answer it. Such a peer is never sent a PING and never timed out by
// HeartbeatInterval + HeartbeatTimeout, however long it stays idle; its own
// PINGs are still answered and a TTL they announce is still enforced.
// Stats.ZMTP30Peers counts the connected 3.0 peers, and the first one to
// join a socket with heartbeats on is logged once at info level, with its
// address. What detects a 3.0 peer that went away:
//
//   - a vanished host, a pulled cable, a silent partition (its kernel no
//     longer answers): TCP keepalive ends the connection once it has been
//     idle for TCPKeepAlive.Idle + Count × Interval, 150 s with the
//     defaults. While data we sent it is still unacknowledged, keepalive
//     does not probe and the kernel's retransmission limit applies instead
//     (on Linux, net.ipv4.tcp_retries2: about 15 minutes by default);
//     Options.WriteTimeout, when set, disconnects it sooner, once its
//     connection has accepted no bytes for that long while data waits;
//   - a peer that closes or resets its connection, or whose process dies
//     (its kernel closes the socket): at once, by the read error;
//   - a frozen process whose kernel still ACKs: nothing, as with any idle
//     3.0 peer; it costs its connection (read and write buffers back to
//     4 KiB when idle) and a send queue bounded by HWM, SendQueueBytes and
//     SendTotalBytes, whose full-queue rule applies (a drop for XPUB and
//     ROUTER, the other peers for PUSH and DEALER); WriteTimeout, when set,
//     disconnects it once its kernel buffers are full.
//
// A deployment that needs a frozen peer caught within seconds uses a peer
// that speaks 3.1 (libzmq, zmqguard), or a shorter TCPKeepAlive and a
// WriteTimeout for the rest.
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
// next Recv (see [Msg]). When 16 batches already wait for Recv, a reader
// hands its batch over from a short background goroutine and keeps reading
// its connection (answering PINGs, applying subscriptions) into one more
// batch; only once that one is full too (128 messages or 256 KiB) does it
// stop reading, and TCP flow control then slows that peer. Received bytes
// waiting for Recv are bounded socket-wide by Options.RecvQueueBytes
// (default 64 MiB): past it, readers stop reading until Recv catches up
// (each connection may still hold the message it was reading). Each
// connection also keeps to a share of that queue: one with 1 MiB or more
// waiting reads no further message until Recv has released some, so a
// peer sending large messages back to back has one ahead of everybody
// else's next message, not the whole queue (it may always read one message,
// whatever its size). A consumer that keeps a large message after Recv
// takes its frames ([Socket.TakeFrames]) instead of copying them. A peer is
// never timed out while its reader waits for Recv, and PINGs keep going out
// to it, so a heartbeating peer keeps the connection. A batch is handed over when the
// connection's read buffer holds no further bytes; if it holds only the
// start of the next message, the batch waits for that message to complete.
//
// # Per-type semantics
//
//   - ROUTER: Recv returns [identity, frames...]. A peer's identity is the
//     one it announced in READY, or, if it announced none, five bytes
//     0x00 + a 32-bit counter (libzmq's form). A second connection announcing
//     an identity already connected is closed (EventRejected, counted as
//     ReasonPolicy and in Stats.IdentityRefusals), unless
//     Options.RouterHandover is set: then the new connection takes the
//     identity over and the old one is closed (its cause says so, counted
//     in Stats.Handovers), as libzmq's ZMQ_ROUTER_HANDOVER. Send(ctx, identity,
//     frames...) needs at least two frames; an unknown or departed identity
//     gives an error matching [ErrUnroutable] naming it in hex, or a
//     counted drop with Options.RouterDropUnroutable; a full peer queue drops
//     the message for that peer (Stats.DroppedHWM).
//   - DEALER: Send round-robins over peers with room and waits (ctx) when
//     none has; Recv fair-queues.
//   - REQ: Send adds the empty delimiter frame and Recv strips it; a reply
//     without one is dropped (ReasonEnvelope). Send and Recv must alternate
//     (an error says so otherwise); a reply is taken only from the peer the request went to.
//     [Socket.Reset] abandons a request after a timeout by closing that
//     connection, so a late reply can never answer the next request.
//   - PULL: Recv fair-queues; Send is an error.
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
//     10,000 topics of 1 MiB of topic bytes together.
//   - SUB: [Socket.Subscribe]/[Socket.Unsubscribe]; Recv returns only
//     messages matching a subscription; Send is an error.
//   - XSUB: as SUB, but Recv is unfiltered and Send passes "\x01topic" /
//     "\x00topic" as subscriptions and any other message to every publisher.
//
// SUB and XSUB send their subscriptions to every publisher as it connects,
// so they survive reconnects. PING commands are answered with PONG (echoing
// the context) by the writer; other commands are never returned as data.
//
// # Endpoints
//
// "tcp://host:port" (Bind accepts host "*" and port 0; [Socket.Endpoint]
// gives the address actually bound) and "ipc://path" (a unix socket).
// Dial returns at once and connects in the background, reconnecting after
// Options.ReconnectMin (100 ms) doubling to ReconnectMax (5 s), jittered.
package socket
