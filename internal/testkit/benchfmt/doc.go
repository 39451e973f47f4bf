// Package benchfmt turns the results file of bench/run.sh into the markdown
// tables of BENCHMARKS.md: the median, the range and the per-round ratios of
// each comparison.
//
// The harness itself is the programs under bench/ (load generators,
// reference receivers, the Python loops in bench/py) and bench/run.sh, which
// runs every comparison interleaved A B A B for several rounds. run.sh
// writes one line per measurement to a results file (see [Parse] for the
// format) and bench/tabulate turns it into markdown with
// [Report.WriteMarkdown], and, for `bench/run.sh summary`, into the one
// summary table of BENCHMARKS.md with [Report.WriteSummary] (its rows
// declared by #summary lines). Nothing here asserts on timing; the harness
// test (package bench, bench/harness_test.go) only checks that the quick
// mode runs end to end.
//
// The package is internal: it is the harness's own tool, not part of
// zmqguard's API.
package benchfmt
