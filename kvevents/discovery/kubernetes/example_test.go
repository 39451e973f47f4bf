package kubernetes_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvevents/discovery/kubernetes"
)

// A Watcher over client-go's fake clientset: the running pod with llm-d's
// label is followed, the pending one is not (yet).
func Example() {
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "llm-d", Name: "vllm-0",
			Labels: map[string]string{"llm-d.ai/inference-serving": "true"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "llm-d", Name: "vllm-1",
			Labels: map[string]string{"llm-d.ai/inference-serving": "true"}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}},
	)
	w := kubernetes.Watcher{Client: client, Namespace: "llm-d", ReplayPort: 5558, Logger: slog.New(slog.DiscardHandler)}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sets := make(chan []kvevents.Source)
	done := make(chan error, 1)
	go func() { done <- w.Discover(ctx, sets) }()
	for _, s := range <-sets {
		fmt.Println(s.Live, s.Replay)
	}
	cancel()
	<-done
	// Output:
	// tcp://10.0.0.7:5557 tcp://10.0.0.7:5558
}
