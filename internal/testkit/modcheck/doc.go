// Package modcheck holds the tests that keep zmqguard's module layout:
// the root module requires only what the library packages import (zmq4,
// msgp, x/crypto, and goleak and rapid for tests); every other module of
// the repository (cmd/, examples/, the metrics and Redis adapters ...) is
// listed in the root's go.work, builds alone from a clone, and a program
// that imports only the library builds no Prometheus, OpenTelemetry, Redis,
// tint or Kubernetes module. It has no code of its own: run its tests with
//
//	go test ./internal/testkit/modcheck
package modcheck
