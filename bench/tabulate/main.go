// Command tabulate turns a results file written by bench/run.sh into the
// markdown tables of BENCHMARKS.md: each comparison's variants as median
// [min..max] over the rounds, and the per-round ratios with their targets.
//
// Usage:
//
//	tabulate RESULTS.tsv
//
// The file format is documented on bench.Parse.
package main

import (
	"fmt"
	"os"

	"github.com/zmqguard/zmqguard/bench"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tabulate RESULTS.tsv")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tabulate:", err)
		os.Exit(1)
	}
	defer f.Close()
	r, err := bench.Parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tabulate:", err)
		os.Exit(1)
	}
	if err := r.WriteMarkdown(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tabulate:", err)
		os.Exit(1)
	}
}
