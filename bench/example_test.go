package bench_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/zmqguard/zmqguard/bench"
)

// Two variants measured in three interleaved rounds, a target and a ratio,
// turned into the markdown table BENCHMARKS.md shows.
func Example() {
	results := strings.Join([]string{
		"#cmp\tdemo\tmsgs/s\tReceive loop",
		"#ratio\tdemo\tours\ttheirs\t>=\t1.2",
		"demo\tours\t1\t2600000",
		"demo\ttheirs\t1\t2000000",
		"demo\ttheirs\t2\t2100000",
		"demo\tours\t2\t2500000",
		"demo\tours\t3\t2700000",
		"demo\ttheirs\t3\t1900000",
	}, "\n")
	r, err := bench.Parse(strings.NewReader(results))
	if err != nil {
		fmt.Println(err)
		return
	}
	r.WriteMarkdown(os.Stdout)
	fmt.Println(bench.Summarize([]float64{3, 1, 2}))
	// Output:
	// **Receive loop** (`demo`)
	//
	// | variant | median msgs/s | [min..max] | rounds | target | met |
	// |---|---|---|---|---|---|
	// | ours | 2.60M | [2.50M..2.70M] | 3 |  |  |
	// | theirs | 2.00M | [1.90M..2.10M] | 3 |  |  |
	// | **ours ÷ theirs** | 1.30× | [1.19..1.42] | 3 | ≥ 1.20× | yes |
	// {3 2 1 3}
}
