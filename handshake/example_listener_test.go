package handshake_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/vllm"
)

// A Go KV-transfer agent serving its metadata on the NIXL side channel,
// and a decode-side handshake against it.
func ExampleListener() {
	hash := "c940fa5f8b20d4d98d462af8137fb052eb4827d811a4ad4dcde0138bddb6d468" // from Factors.Hash
	meta := handshake.NixlAgentMetadata{
		EngineID:         "prefill-0",
		AgentMetadata:    []byte("nixl-agent-blob"),
		KVCachesBaseAddr: []uint64{0x7f3a00000000},
		NumBlocks:        1000,
		BlockLens:        []int64{65536},
		KVCacheLayout:    "HND",
		BlockSize:        16,
		DCPSize:          1,
		PCPSize:          1,
	}
	encoded, _ := handshake.EncodePayload(hash, &meta, vllm.Latest())

	l, err := handshake.NewListener(handshake.ListenerConfig{
		Endpoint:     "tcp://127.0.0.1:0",
		Payloads:     map[handshake.Rank][]byte{{PP: 0, TP: 0}: encoded},
		ErrorReplies: true,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- l.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
		l.Close()
	}()

	opts := handshake.ClientOptions{ExpectedHash: hash, ExpectedEngineID: "prefill-0"}
	r, err := handshake.Fetch(ctx, l.Endpoint(), handshake.Request{Variant: handshake.V3}, opts)
	fmt.Println(r.Metadata.EngineID, r.Metadata.NumBlocks, r.Metadata.KVCacheLayout, err)

	_, err = handshake.Fetch(ctx, l.Endpoint(), handshake.Request{Variant: handshake.V3, TP: 3}, opts)
	fmt.Println(errors.Is(err, handshake.ErrRejected))

	st := l.Stats()
	fmt.Println(st.Served[handshake.V3], st.ErrorReplies, st.Loop.Dropped[decodeguard.ReasonDecode])
	// Output:
	// prefill-0 1000 HND <nil>
	// true
	// 1 1 0
}
