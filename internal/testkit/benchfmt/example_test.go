package benchfmt_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/zmqguard/zmqguard/internal/testkit/benchfmt"
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
	r, err := benchfmt.Parse(strings.NewReader(results))
	if err != nil {
		fmt.Println(err)
		return
	}
	r.WriteMarkdown(os.Stdout)
	fmt.Println(benchfmt.Summarize([]float64{3, 1, 2}))
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

// The summary table: each #summary line one row, a ratio of two variants
// or one variant's value, against a goal; #meta lines follow it.
func ExampleReport_WriteSummary() {
	results := strings.Join([]string{
		"#cmp\tdemo-cpu\tCPU ns/msg\tCPU per message",
		"demo-cpu\tours\t1\t200",
		"demo-cpu\ttheirs\t1\t420",
		"demo-cpu\tours\t2\t210",
		"demo-cpu\ttheirs\t2\t400",
		"#summary\tCPU per message (theirs ÷ ours)\tdemo-cpu\ttheirs\tours\t>=\t2",
		"#summary\tours alone\tdemo-cpu\tours\t-\t<=\t250",
		"#meta\tload average at the start\t0.41 0.35 0.30",
	}, "\n")
	r, err := benchfmt.Parse(strings.NewReader(results))
	if err != nil {
		fmt.Println(err)
		return
	}
	r.WriteSummary(os.Stdout)
	// Output:
	// | measure | A | B | A ÷ B (A alone when no B), median [min..max] | goal | met |
	// |---|---|---|---|---|---|
	// | CPU per message (theirs ÷ ours) (`demo-cpu`) | theirs 410 CPU ns/msg | ours 205 CPU ns/msg | 2.00× [1.90..2.10] (2 rounds) | ≥ 2.00× | yes |
	// | ours alone (`demo-cpu`) | ours 205 CPU ns/msg |  | 205 [200..210] (2 rounds) | ≤ 250 | yes |
	//
	// - load average at the start: 0.41 0.35 0.30
}
