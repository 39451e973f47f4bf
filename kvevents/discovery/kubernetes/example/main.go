// Command example follows a vLLM fleet in Kubernetes: it watches the pods
// llm-d labels as inference servers, subscribes to each pod's KV-event
// publisher, keeps a KV-cache index of what every engine holds, and answers
// "which engine holds the longest prefix of these tokens" on
// http://ADDR/score (a JSON array of token ids in, the scores out).
//
// Run it in the cluster, under a service account allowed to list and watch
// pods in the namespace:
//
//	example -namespace llm-d -model meta-llama/Llama-3.1-8B-Instruct -block-size 16
//
// Engines join the index when their pod runs and leave it (their entries
// dropped) when it stops, is deleted or moves to another IP.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvevents/discovery"
	"github.com/zmqguard/zmqguard/kvevents/discovery/kubernetes"
	"github.com/zmqguard/zmqguard/kvindex"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("namespace", "", "the namespace to watch (default: every namespace the service account may list)")
	selector := fs.String("selector", "llm-d.ai/inference-serving=true", "the pods' label selector")
	port := fs.Int("port", 5557, "each pod's KV-event port")
	replay := fs.Int("replay-port", 0, "each pod's replay port (0: none)")
	model := fs.String("model", "", "the model the engines serve (required)")
	blockSize := fs.Int("block-size", 16, "the engines' KV block size in tokens")
	addr := fs.String("http", "127.0.0.1:8080", "where to serve /score")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" {
		return errors.New("-model is required")
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	cfg, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("not running in a cluster: %w", err)
	}
	client, err := k8s.NewForConfig(cfg)
	if err != nil {
		return err
	}
	x, err := kvindex.New(kvindex.Config{Model: *model, BlockSize: *blockSize, Logger: logger})
	if err != nil {
		return err
	}
	defer x.Close()
	sub, err := kvevents.NewSubscriber(kvevents.Config{
		Logger:  logger,
		Handler: func(_ context.Context, u kvevents.Update) error { return x.Apply(u) },
	})
	if err != nil {
		return err
	}
	defer sub.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- sub.Run(ctx) }()
	go func() {
		errc <- discovery.Follow(ctx, sub, kubernetes.Watcher{Client: client, Namespace: *ns,
			Selector: *selector, Port: *port, ReplayPort: *replay, Logger: logger})
	}()

	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 5 * time.Second, Handler: scoreHandler(x, *model)}
	go func() {
		<-ctx.Done()
		shut, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		srv.Shutdown(shut)
	}()
	logger.Info("serving /score", "addr", *addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		cancel()
		return err
	}
	cancel()
	return errors.Join(<-errc, <-errc)
}

// scoreHandler answers POST /score with a JSON array of token ids: the
// index's scores for them.
func scoreHandler(x *kvindex.Index, model string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tokens []int64
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&tokens); err != nil {
			http.Error(w, "a JSON array of token ids, at most 1 MiB", http.StatusBadRequest)
			return
		}
		res, err := x.Score(kvindex.ScoreRequest{Model: model, Tokens: tokens})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(res)
	})
}
