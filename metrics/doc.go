// Package metrics is the one description of zmqguard's metrics: a fixed set
// of metric families ([Families]) and a [Set] of components (loops, sockets,
// guarded listeners, handshake listeners, a coordinator, source sets, KV-cache
// indexes) whose Stats snapshots it turns into samples at scrape time.
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
// source. Every drop counter carries reason, one of decodeguard.Reasons();
// the zmqguard_kvindex_ families' reason is the index's own closed set
// (why a store was not indexed, why an entry left).
package metrics
