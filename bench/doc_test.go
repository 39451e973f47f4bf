// Package bench holds the test of zmqguard's benchmark harness: the
// programs under bench/ and bench/run.sh (BENCHMARKS.md). The statistics
// behind the tables are in internal/testkit/benchfmt; this directory has no
// importable package.
package bench
