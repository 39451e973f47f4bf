// Package discovery finds the KV-event publishers of a fleet that changes
// and keeps a kvevents.Subscriber following exactly them (issue 36).
//
//	var sub *kvevents.Subscriber // running, feeding an index
//	// The engines: a headless service's ready pods, and those a file lists.
//	err := discovery.Follow(ctx, sub,
//		discovery.DNS{Host: "vllm-engines.ns.svc.cluster.local.", Port: 5557, ReplayPort: 5558},
//		discovery.File{Path: "/etc/zmqguard/engines"})
//
// A Discoverer reports the complete set of sources it sees each time that
// set may have changed; Follow turns consecutive sets into
// Subscriber.Add and Subscriber.Remove calls, so a source that leaves the
// set is removed (its engine departs the index) and one that joins is
// added. DNS and File are the discoverers this package ships; the
// Kubernetes pod watcher is its own module (kvevents/discovery/kubernetes)
// so that this module never requires client-go. Anyone can write another:
// the interface is one method.
package discovery

import (
	"context"

	"github.com/zmqguard/zmqguard/kvevents"
)

// Discoverer finds sources. Discover sends the complete current set of
// sources on sets each time it may have changed (a set equal to the
// previous one is allowed and changes nothing), and returns when ctx ends
// (with nil) or when it cannot go on (with an error naming why). An error
// that only affects one round (a DNS timeout, a bad line in a file) is not
// returned: it is logged and the previous set stays in force.
type Discoverer interface {
	Discover(ctx context.Context, sets chan<- []kvevents.Source) error
}
