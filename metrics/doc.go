// Package metrics turns the Stats snapshots of zmqguard's components into
// one fixed set of metric families, read at scrape time by an adapter.
//
//	set := metrics.NewSet()
//	set.AddLoop("jobs", l)       // a *loop.Loop[T]
//	set.AddSocket("jobs", pull)  // its *socket.Socket
//	set.Collect(func(s metrics.Sample) {
//		fmt.Println(s.Family.Name, s.Labels, s.Value)
//	})
//	// or: zgprom.NewCollector(set), zgotel.Register(meter, set)
//
// A [Set] holds components (loops, sockets, guarded listeners, handshake
// listeners, a coordinator, engine output receivers, KV-event subscribers,
// KV-cache indexes, source sets) and turns their snapshots into samples of
// the families [Families] lists. Nothing runs on the hot path.
//
// It imports no metrics library. The adapters do: package zgprom exposes a
// Set as a prometheus.Collector, package zgotel as OpenTelemetry observable
// instruments. Both read the same families, so a Prometheus scrape and an
// OpenTelemetry export of one process report the same names and values.
// Library packages never import metrics, zgprom or zgotel, so embedding
// zmqguard builds no metrics dependency unless the program asks for one.
//
// Names follow Prometheus conventions: a zmqguard_ prefix, base units,
// _total on counters, and only four label names: socket, reason, loop and
// source. Every drop and refusal counter carries reason, one of
// decodeguard.Reasons() (refusals are ..._refused_total); a few families'
// reason is a closed set of their own, named after their Stats fields: the
// zmqguard_kvindex_ families' (why a store was not indexed, why an entry
// left), zmqguard_kvevents_resets_total's (seq_back, digest, jump, resync:
// kvevents.SourceStats.ResetsBy) and the connection evictions' (idle,
// over_share, reserve: the Evicted fields of socket and zmtpguard Stats).
package metrics
