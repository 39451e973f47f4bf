// Package bench is zmqguard's benchmark harness: the programs under bench/
// (load generators, reference receivers, the Python loops in bench/py) and
// bench/run.sh, which runs every comparison interleaved A B A B for several
// rounds and prints the median, the range and the per-round ratios as the
// markdown tables of BENCHMARKS.md.
//
// This package itself holds the statistics behind those tables: run.sh
// writes one line per measurement to a results file (see [Parse] for the
// format) and bench/tabulate turns it into markdown with [Report.WriteMarkdown],
// and, for `bench/run.sh summary`, into the one summary table of BENCHMARKS.md
// with [Report.WriteSummary] (its rows declared by #summary lines).
// Nothing here asserts on timing; the harness test only checks that the
// quick mode runs end to end.
package bench
