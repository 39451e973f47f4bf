// Command kvagent is a KV-transfer agent serving its own metadata: the
// prefill side of vLLM's NIXL side channel, written in Go. It describes its
// KV cache once per tensor-parallel rank (NixlAgentMetadata), wraps each
// description with the deployment's compatibility hash, and serves them with
// handshake.Listener, which answers V1, V2 and V3 requests exactly as vLLM's
// listener does and drops (and counts) everything else without stopping.
//
//	go run ./examples/kvagent -self-check        # serve, and fetch our own metadata once
//	go run ./examples/kvagent -self-check -exit  # the same, stopping once it is fetched
//	zmqguard probe tcp://127.0.0.1:5600 --tp 1   # triage it from another terminal
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kvagent:", err)
		os.Exit(1)
	}
}

// factors are this deployment's compatibility factors: a decode worker pairs
// with us only when its own factors hash to the same value.
var factors = handshake.Factors{
	VLLMVersion: "0.11.1",
	Model:       "meta-llama/Llama-3.1-8B-Instruct", Dtype: "torch.bfloat16",
	NumKVHeads: 8, HeadSize: 128, NumHiddenLayers: 32, AttnBackendName: "FLASH_ATTN",
	CacheDtype: "auto", IsHMAEnabled: true, TransferMode: "pull",
}

// describe returns the metadata of one TP rank's KV cache: one region per
// layer for K and for V, each numBlocks blocks of 16 tokens.
func describe(engineID string, tp, numBlocks int) handshake.NixlAgentMetadata {
	const blockSize, headsPerRank, headSize, bytesPerElem = 16, 4, 128, 2
	blockLen := int64(blockSize * headsPerRank * headSize * bytesPerElem)
	base := uint64(0x7f3a00000000) + uint64(tp)<<40
	m := handshake.NixlAgentMetadata{
		EngineID:                        engineID,
		AgentMetadata:                   fmt.Appendf(nil, "nixl-agent:%s:tp%d", engineID, tp), // the NIXL agent's own blob
		DeviceID:                        int64(tp),
		NumBlocks:                       int64(numBlocks),
		KVCacheLayout:                   "HND",
		BlockSize:                       blockSize,
		AttnBackendName:                 factors.AttnBackendName,
		PhysicalBlocksPerLogicalKVBlock: 1,
		DCPSize:                         1,
		PCPSize:                         1,
	}
	for layer := range 2 * factors.NumHiddenLayers {
		m.KVCachesBaseAddr = append(m.KVCachesBaseAddr, base+uint64(layer)*uint64(numBlocks)*uint64(blockLen))
		m.BlockLens = append(m.BlockLens, blockLen)
		m.BlockStrides = append(m.BlockStrides, blockLen)
	}
	return m
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvagent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bind := fs.String("bind", "tcp://127.0.0.1:5600", "ROUTER endpoint decode workers connect to (vLLM: port 5600 + DP index)")
	engineID := fs.String("engine-id", "prefill-0", "this engine's id")
	tpSize := fs.Int("tp-size", 2, "tensor-parallel ranks served")
	numBlocks := fs.Int("num-blocks", 4096, "KV cache blocks per region")
	selfCheck := fs.Bool("self-check", false, "fetch our own metadata once, as a decode worker would, and log it")
	exitAfter := fs.Bool("exit", false, "with -self-check: stop serving once the self-check is done (exit 1 if it failed)")
	runFor := fs.Duration("for", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(tint.NewTextHandler(stderr, &tint.Options{TimeFormat: time.TimeOnly, NoColor: !isTerminal(stderr)}))
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}

	hash, err := factors.Hash()
	if err != nil {
		return err
	}
	payloads := map[handshake.Rank][]byte{}
	for tp := range *tpSize {
		m := describe(*engineID, tp, *numBlocks)
		if payloads[handshake.Rank{TP: tp}], err = handshake.EncodePayload(hash, &m, factors.Release); err != nil {
			return err
		}
	}
	l, err := handshake.NewListener(handshake.ListenerConfig{
		Endpoint:     *bind,
		Payloads:     payloads,
		ErrorReplies: true, // an unserved rank fails at once instead of after the client's 5 s timeout
		Logger:       logger,
	})
	if err != nil {
		return err
	}
	defer l.Close()
	logger.Info("serving KV metadata", "endpoint", l.Endpoint(), "engine_id", *engineID, "tp_size", *tpSize, "hash", hash[:12])

	var wg sync.WaitGroup
	defer wg.Wait()
	var checkErr error // the self-check's, read after wg.Wait
	if *selfCheck {
		serveCtx, stopServing := context.WithCancel(ctx)
		defer stopServing()
		if *exitAfter {
			ctx = serveCtx
		}
		wg.Go(func() {
			defer stopServing()
			opts := handshake.ClientOptions{ExpectedHash: hash, ExpectedEngineID: *engineID, Socket: socket.Options{Logger: logger}}
			rep, err := handshake.Fetch(serveCtx, l.Endpoint(), handshake.Request{Variant: handshake.V3, TP: *tpSize - 1}, opts)
			if err != nil {
				logger.Error("self-check failed", "err", err)
				checkErr = fmt.Errorf("self-check: %w", err)
				return
			}
			fmt.Fprintf(stdout, "self-check: tp %d of %s: %d regions, %d blocks of %d tokens, layout %s, rtt %s\n",
				rep.Metadata.DeviceID, rep.Metadata.EngineID, len(rep.Metadata.KVCachesBaseAddr),
				rep.Metadata.NumBlocks, rep.Metadata.BlockSize, rep.Metadata.KVCacheLayout, rep.RTT.Round(time.Microsecond))
		})
	}
	err = l.Serve(ctx)
	wg.Wait() // the self-check writes to stdout too
	st := l.Stats()
	fmt.Fprintf(stdout, "served %d (V1 %d, V2 %d, V3 %d), dropped %d, refused connections %d\n",
		st.Served[handshake.V1]+st.Served[handshake.V2]+st.Served[handshake.V3], st.Served[handshake.V1], st.Served[handshake.V2], st.Served[handshake.V3],
		st.Loop.Dropped.Total(), sum(st.Socket.Refused[:]))
	if errors.Is(err, handshake.ErrListenerClosed) {
		err = nil
	}
	if err == nil && *exitAfter {
		err = checkErr
	}
	return err
}

func sum(v []uint64) (n uint64) {
	for _, x := range v {
		n += x
	}
	return n
}

// isTerminal reports whether w is a terminal, for tint's colours.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
