// Command tabulate turns a results file written by bench/run.sh into the
// markdown tables of BENCHMARKS.md: each comparison's variants as median
// [min..max] over the rounds, and the per-round ratios with their targets.
//
// Usage:
//
//	tabulate RESULTS.tsv            every comparison's table
//	tabulate -summary RESULTS.tsv   the summary table only (its #summary rows)
//
// The file format is documented on benchfmt.Parse.
package main

import (
	"fmt"
	"os"

	"github.com/zmqguard/zmqguard/internal/testkit/benchfmt"
)

func main() {
	args := os.Args[1:]
	summary := len(args) == 2 && args[0] == "-summary"
	if summary {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: tabulate [-summary] RESULTS.tsv")
		os.Exit(2)
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tabulate:", err)
		os.Exit(1)
	}
	defer f.Close()
	r, err := benchfmt.Parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tabulate:", err)
		os.Exit(1)
	}
	write := r.WriteMarkdown
	if summary {
		write = r.WriteSummary
	}
	if err := write(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tabulate:", err)
		os.Exit(1)
	}
}
