// Package kubernetes finds the KV-event publishers of a vLLM fleet by
// watching its pods through the Kubernetes API, the way llm-d's indexer does
// (a label selector, one endpoint per pod IP), and reports them to
// discovery.Follow as a discovery.Discoverer.
//
// It is its own Go module (github.com/zmqguard/zmqguard/kvevents/discovery/kubernetes)
// so that the library's go.mod never requires client-go: only a program that
// imports this package downloads it.
//
// Which pods are followed: those the selector matches in the namespace whose
// phase is Running, that have a pod IP and are not being deleted. Readiness is
// not required: an engine that fails its readiness probe for a while (busy,
// still loading) keeps its cache and keeps publishing, and retiring it would
// drop its entries from the index for nothing; a pod that stops running, is
// deleted or loses its IP leaves the set, and discovery.Follow removes it,
// which retires the engine (kvevents.UpdateDeparted).
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/zmqguard/zmqguard/kvevents"
)

// defaultSelector is the label selector llm-d's indexer watches by default.
const defaultSelector = "llm-d.ai/inference-serving=true"

// Watcher watches pods and reports one kvevents.Source per followed pod:
// Live "tcp://<pod IP>:<Port>", Replay "tcp://<pod IP>:<ReplayPort>" when
// ReplayPort is set, and Name equal to Live (a pod rescheduled with a new IP
// is a new engine). Create it as a literal; Client is required.
type Watcher struct {
	// Client is the Kubernetes clientset (a real one from
	// kubernetes.NewForConfig, or client-go's fake clientset in tests).
	Client k8s.Interface
	// Namespace to watch; "" watches every namespace the client may list.
	Namespace string
	// Selector is the label selector; zero means
	// "llm-d.ai/inference-serving=true", llm-d's default.
	Selector string
	// Port is the publisher's live port on each pod; zero means 5557
	// (vLLM's default KV-events endpoint, tcp://*:5557).
	Port int
	// ReplayPort is the publisher's replay port; zero means none (gaps are
	// then lost ranges).
	ReplayPort int
	// Engine is copied to every Source's Engine ("" or "vllm", or "sglang").
	Engine string
	// Settle batches the pod events of one burst into one set: after a
	// change, the set is reported once no other change came for Settle.
	// Zero means 200 ms.
	Settle time.Duration
	// Logger receives one line per pod that joins or leaves; nil means
	// slog.Default().
	Logger *slog.Logger
}

// errNoClient is returned by Discover when Client is nil.
var errNoClient = errors.New("kubernetes: Watcher.Client is nil")

func (w *Watcher) fill() (labels.Selector, error) {
	if w.Client == nil {
		return nil, errNoClient
	}
	if w.Port == 0 {
		w.Port = 5557
	}
	if w.Port < 1 || w.Port > 65535 {
		return nil, fmt.Errorf("kubernetes: Watcher.Port %d is not a TCP port (1..65535)", w.Port)
	}
	if w.ReplayPort < 0 || w.ReplayPort > 65535 {
		return nil, fmt.Errorf("kubernetes: Watcher.ReplayPort %d is not a TCP port (1..65535, or 0 for none)", w.ReplayPort)
	}
	if w.Selector == "" {
		w.Selector = defaultSelector
	}
	sel, err := labels.Parse(w.Selector)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: Watcher.Selector %q: %v", w.Selector, err)
	}
	switch w.Engine {
	case "", "vllm", "sglang":
	default:
		return nil, fmt.Errorf("kubernetes: Watcher.Engine %q is not \"vllm\" or \"sglang\"", w.Engine)
	}
	if w.Settle < 0 {
		return nil, fmt.Errorf("kubernetes: Watcher.Settle %v is negative", w.Settle)
	}
	if w.Settle == 0 {
		w.Settle = 200 * time.Millisecond
	}
	if w.Logger == nil {
		w.Logger = slog.Default()
	}
	return sel, nil
}

// Discover implements discovery.Discoverer: it lists and watches the pods
// (re-listing by itself after a broken watch, as client-go's informers do),
// sends the complete set of followed pods once the first list is in and
// after every burst of changes, and returns nil when ctx ends. It returns
// an error only for a bad Watcher field.
func (w Watcher) Discover(ctx context.Context, sets chan<- []kvevents.Source) error {
	sel, err := w.fill() // on Discover's own copy: the caller's Watcher is not changed
	if err != nil {
		return err
	}
	pods := w.Client.CoreV1().Pods(w.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel.String()
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.String()
			return pods.Watch(ctx, o)
		},
	}
	// The wrapper tells the reflector whether the client can stream its
	// initial list (a real API server can; client-go's fake cannot).
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, w.Client), &corev1.Pod{}, 0, cache.Indexers{})
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, n any) { poke(n) },
		DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("kubernetes: adding the pod event handler: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(runCtx) }()
	defer func() { stop(); <-done }()

	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil // ctx ended before the first list
	}
	var last []kvevents.Source
	first := true
	timer := time.NewTimer(0) // the first set goes out at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			timer.Reset(w.Settle)
			continue
		case <-timer.C:
		}
		set := w.sources(sel, inf.GetStore().List())
		if !first && slices.Equal(set, last) {
			continue
		}
		w.logChanges(last, set)
		first = false
		select {
		case sets <- set:
			last = set
		case <-ctx.Done():
			return nil
		}
	}
}

// sources turns the informer's pods into the sorted set of Sources of the
// pods followed (see the package doc for which).
func (w *Watcher) sources(sel labels.Selector, objs []any) []kvevents.Source {
	set := make([]kvevents.Source, 0, len(objs))
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || !Followed(p) || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		live := "tcp://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(w.Port))
		if seen[live] {
			continue // two pods with one IP (host network): one engine per endpoint
		}
		seen[live] = true
		src := kvevents.Source{Name: live, Live: live, Engine: w.Engine}
		if w.ReplayPort != 0 {
			src.Replay = "tcp://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(w.ReplayPort))
		}
		set = append(set, src)
	}
	slices.SortFunc(set, func(a, b kvevents.Source) int { return strings.Compare(a.Name, b.Name) })
	return set
}

// Followed reports whether a pod is followed: Running, with a pod IP that
// parses as an address, and not being deleted.
func Followed(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	return net.ParseIP(p.Status.PodIP) != nil
}

func (w *Watcher) logChanges(old, cur []kvevents.Source) {
	in := func(s []kvevents.Source, name string) bool {
		_, ok := slices.BinarySearchFunc(s, name, func(a kvevents.Source, n string) int { return strings.Compare(a.Name, n) })
		return ok
	}
	for _, s := range cur {
		if !in(old, s.Name) {
			w.Logger.Info("kubernetes: pod joins", "component", "discovery", "source", s.Name)
		}
	}
	for _, s := range old {
		if !in(cur, s.Name) {
			w.Logger.Info("kubernetes: pod leaves", "component", "discovery", "source", s.Name)
		}
	}
}
