package benchfmt

import (
	"math"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Summary
	}{
		{nil, Summary{}},
		{[]float64{math.NaN()}, Summary{}},
		{[]float64{3}, Summary{N: 1, Median: 3, Min: 3, Max: 3}},
		{[]float64{5, 1, 3}, Summary{N: 3, Median: 3, Min: 1, Max: 5}},
		{[]float64{4, 1, 3, 2}, Summary{N: 4, Median: 2.5, Min: 1, Max: 4}},
		{[]float64{2, math.NaN(), 1}, Summary{N: 2, Median: 1.5, Min: 1, Max: 2}},
	} {
		if got := Summarize(c.in); got != c.want {
			t.Errorf("Summarize(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

const sample = "#cmp\tx\tmsgs/s\tA title\n" +
	"#target\tx\ta\t>=\t100\n" +
	"#ratio\tx\ta\tb\t>=\t1.5\n" +
	"#note\tx\tsome note\n" +
	"x\ta\t1\t120\n" +
	"x\tb\t1\t100\n" +
	"x\ta\t2\t90\n" +
	"x\tb\t2\t40\n" +
	"x\ta\t3\tNaN\n" +
	"x\tb\t3\t50\n" +
	"\n" +
	"y\tc\t1\t0.5\n"

func TestParseAndRatios(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Comparisons) != 2 {
		t.Fatalf("%d comparisons", len(r.Comparisons))
	}
	x := r.Comparisons[0]
	if x.ID != "x" || x.Unit != "msgs/s" || x.Title != "A title" || len(x.Notes) != 1 {
		t.Fatalf("comparison %+v", x)
	}
	if got := x.Summary("a"); got != (Summary{N: 2, Median: 105, Min: 90, Max: 120}) {
		t.Errorf("a: %+v", got)
	}
	// Per-round ratios: 1.2, 2.25 and NaN (a missing value in round 3).
	rv := x.RatioValues(x.Ratios[0])
	if len(rv) != 3 || rv[0] != 1.2 || rv[1] != 2.25 || !math.IsNaN(rv[2]) {
		t.Errorf("ratios %v", rv)
	}
	if s := Summarize(rv); s.N != 2 || s.Median != 1.725 {
		t.Errorf("ratio summary %+v", s)
	}
}

func TestWriteMarkdown(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if err := r.WriteMarkdown(&sb); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{
		"**A title** (`x`)",
		"| a | 105 | [90.0..120] | 2 | ≥ 100 | yes |",
		"| b | 50.0 | [40.0..100] | 3 |  |  |",
		"| **a ÷ b** | 1.73× | [1.20..2.25] | 2 | ≥ 1.50× | yes |",
		"some note",
		"**y** (`y`)",
		"| c | 0.50 | [0.50..0.50] | 1 |  |  |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestTargetMissed(t *testing.T) {
	r, err := Parse(strings.NewReader("#target\tz\tv\t<=\t2\nz\tv\t1\t3\n#ratio\tz\tv\tw\t>=\t1\n"))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	r.WriteMarkdown(&sb)
	if !strings.Contains(sb.String(), "| v | 3.00 | [3.00..3.00] | 1 | ≤ 2.00 | **no** |") ||
		!strings.Contains(sb.String(), "| **v ÷ w** | – | – | 0 | ≥ 1.00× | no data |") {
		t.Errorf("got:\n%s", sb.String())
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"#cmp\tx\tunit\n",
		"#ratio\tx\ta\n",
		"#ratio\tx\ta\tb\t>\t1\n",
		"#target\tx\ta\t>=\tlots\n",
		"#note\tx\n",
		"#bogus\tx\n",
		"x\ta\t1\n",
		"x\ta\tone\t5\n",
		"x\ta\t-1\t5\n",
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("#ratio\tx\ta\tb\n")
	f.Add("x\ta\t1\t1e309\n")
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		var sb strings.Builder
		if err := r.WriteMarkdown(&sb); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Comparisons {
			for _, v := range c.Variants {
				if s := c.Summary(v); s.N > 0 && (s.Min > s.Median || s.Median > s.Max) {
					t.Fatalf("summary out of order: %+v", s)
				}
			}
		}
	})
}

// TestWriteSummary: #summary rows become one table (ratio rows, one-value
// rows, rows of comparisons that were not run left out), with #meta lines
// and the per-comparison load average.
func TestWriteSummary(t *testing.T) {
	in := sample +
		"#summary\tx beats b\tx\ta\tb\t>=\t1.5\n" +
		"#summary\ty alone\ty\tc\t-\t<=\t1\n" +
		"#summary\tnot run\tz\ta\tb\t>=\t2\n" +
		"#meta\tload average at the start\t0.50 0.40 0.30\n" +
		"load\tx\t1\t0.5\n" +
		"load\tx\t2\t1.5\n"
	r, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| x beats b (`x`) | a 105 msgs/s | b 50.0 msgs/s | 1.73× [1.20..2.25] (2 rounds) | ≥ 1.50× | yes |",
		"| y alone (`y`) | c 0.50 |  | 0.50 [0.50..0.50] (1 rounds) | ≤ 1.00 | yes |",
		"- load average at the start: 0.50 0.40 0.30",
		"x 1.00 [0.50..1.50]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not run") {
		t.Errorf("a row of a comparison that was not run is printed:\n%s", out)
	}
	if _, err := Parse(strings.NewReader("#summary\tl\tx\ta\n")); err == nil {
		t.Error("a short #summary line parsed")
	}
}
