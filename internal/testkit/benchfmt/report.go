package benchfmt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Summary is the median and range of one variant's measurements.
type Summary struct {
	N                int
	Median, Min, Max float64
}

// Summarize returns the median, minimum and maximum of vals (the mean of the
// two middle values for an even count). NaNs are ignored; an empty input
// gives N == 0.
func Summarize(vals []float64) Summary {
	v := make([]float64, 0, len(vals))
	for _, x := range vals {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Summary{}
	}
	slices.Sort(v)
	s := Summary{N: len(v), Min: v[0], Max: v[len(v)-1]}
	if len(v)%2 == 1 {
		s.Median = v[len(v)/2]
	} else {
		s.Median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return s
}

// Target is a goal for a comparison: a variant's median, or a ratio's
// median, compared with Value by Op (">=" or "<=").
type Target struct {
	Op    string
	Value float64
}

// Met reports whether x meets t.
func (t Target) Met(x float64) bool {
	if t.Op == "<=" {
		return x <= t.Value
	}
	return x >= t.Value
}

// String renders t, for example "≥ 1.2".
func (t Target) String() string {
	sym := "≥"
	if t.Op == "<=" {
		sym = "≤"
	}
	return sym + " " + format(t.Value)
}

// Ratio is a ratio of two variants of a comparison, computed round by
// round (A's value in round r divided by B's in the same round).
type Ratio struct {
	A, B   string
	Target *Target
}

// Comparison is one table: variants measured in the same rounds.
type Comparison struct {
	ID, Unit, Title string
	// Variants in the order they first appear.
	Variants []string
	// Values[variant][round] is one measurement.
	Values  map[string]map[int]float64
	Ratios  []Ratio
	Targets map[string]*Target
	Notes   []string
}

// Report is a parsed results file.
type Report struct {
	Comparisons []*Comparison
	// Rows are the summary table's rows, in the order declared.
	Rows []SummaryRow
	// Meta holds the run's #meta lines (such as the load average), in order.
	Meta [][2]string
	byID map[string]*Comparison
}

// SummaryRow is one row of the summary table ([Report.WriteSummary]): the
// median of variant A of comparison Cmp against variant B's and their
// per-round ratio A÷B, or, when B is empty, A's median alone, each against
// an optional goal. Any section of the harness may declare rows, so a new
// comparison adds its own rows to the one table.
type SummaryRow struct {
	Label, Cmp, A, B string
	Goal             *Target
}

func (r *Report) get(id string) *Comparison {
	if c, ok := r.byID[id]; ok {
		return c
	}
	c := &Comparison{ID: id, Values: map[string]map[int]float64{}, Targets: map[string]*Target{}}
	r.byID[id] = c
	r.Comparisons = append(r.Comparisons, c)
	return c
}

// Parse reads a results file. Each line is one of (fields separated by
// tabs; blank lines are ignored):
//
//	#cmp     ID UNIT TITLE            declares a comparison (optional)
//	#ratio   ID A B [OP VALUE]        a per-round ratio A÷B, with an optional target
//	#target  ID VARIANT OP VALUE      a target for a variant's median
//	#note    ID TEXT                  a line printed under the table
//	#summary LABEL ID A B [OP VALUE]  a row of the summary table: A÷B of comparison ID
//	                                  (B "-": A's median alone), with an optional goal
//	#meta    KEY TEXT                 a fact about the run (load average, machine)
//	ID VARIANT ROUND VALUE            one measurement
//
// OP is ">=" or "<=". A value that is not a number (a failed run) is kept
// as missing.
func Parse(rd io.Reader) (*Report, error) {
	r := &Report{byID: map[string]*Comparison{}}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "\t")
		bad := func(why string) error { return fmt.Errorf("results line %d: %s", ln, why) }
		switch f[0] {
		case "#cmp":
			if len(f) < 4 {
				return nil, bad("#cmp needs ID, UNIT and TITLE")
			}
			c := r.get(f[1])
			c.Unit, c.Title = f[2], strings.Join(f[3:], " ")
		case "#ratio":
			if len(f) != 4 && len(f) != 6 {
				return nil, bad("#ratio needs ID, A, B and optionally OP, VALUE")
			}
			ra := Ratio{A: f[2], B: f[3]}
			if len(f) == 6 {
				t, err := parseTarget(f[4], f[5])
				if err != nil {
					return nil, bad(err.Error())
				}
				ra.Target = t
			}
			c := r.get(f[1])
			c.Ratios = append(c.Ratios, ra)
		case "#target":
			if len(f) != 5 {
				return nil, bad("#target needs ID, VARIANT, OP and VALUE")
			}
			t, err := parseTarget(f[3], f[4])
			if err != nil {
				return nil, bad(err.Error())
			}
			c := r.get(f[1])
			c.Targets[f[2]] = t
			c.addVariant(f[2])
		case "#summary":
			if len(f) != 5 && len(f) != 7 {
				return nil, bad("#summary needs LABEL, ID, A, B and optionally OP, VALUE")
			}
			row := SummaryRow{Label: f[1], Cmp: f[2], A: f[3], B: f[4]}
			if row.B == "-" {
				row.B = ""
			}
			if len(f) == 7 {
				t, err := parseTarget(f[5], f[6])
				if err != nil {
					return nil, bad(err.Error())
				}
				row.Goal = t
			}
			r.Rows = append(r.Rows, row)
		case "#meta":
			if len(f) < 3 {
				return nil, bad("#meta needs KEY and TEXT")
			}
			r.Meta = append(r.Meta, [2]string{f[1], strings.Join(f[2:], " ")})
		case "#note":
			if len(f) < 3 {
				return nil, bad("#note needs ID and TEXT")
			}
			c := r.get(f[1])
			c.Notes = append(c.Notes, strings.Join(f[2:], " "))
		default:
			if strings.HasPrefix(f[0], "#") {
				return nil, bad("unknown directive " + strconv.Quote(f[0]))
			}
			if len(f) != 4 {
				return nil, bad("a measurement needs ID, VARIANT, ROUND and VALUE")
			}
			round, err := strconv.Atoi(f[2])
			if err != nil || round < 0 {
				return nil, bad("bad round " + strconv.Quote(f[2]))
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(f[3]), 64)
			if err != nil || math.IsInf(v, 0) {
				v = math.NaN()
			}
			c := r.get(f[0])
			c.addVariant(f[1])
			c.Values[f[1]][round] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

func (c *Comparison) addVariant(v string) {
	if _, ok := c.Values[v]; !ok {
		c.Values[v] = map[int]float64{}
		c.Variants = append(c.Variants, v)
	}
}

func parseTarget(op, val string) (*Target, error) {
	if op != ">=" && op != "<=" {
		return nil, errors.New("target operator must be >= or <=")
	}
	v, err := strconv.ParseFloat(val, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, errors.New("bad target value " + strconv.Quote(val))
	}
	return &Target{Op: op, Value: v}, nil
}

// Summary returns the summary of a variant's measurements.
func (c *Comparison) Summary(variant string) Summary {
	return Summarize(values(c.Values[variant]))
}

// RatioValues returns A÷B for every round in which both were measured, in
// round order.
func (c *Comparison) RatioValues(ra Ratio) []float64 {
	a, b := c.Values[ra.A], c.Values[ra.B]
	rounds := make([]int, 0, len(a))
	for r := range a {
		if _, ok := b[r]; ok {
			rounds = append(rounds, r)
		}
	}
	slices.Sort(rounds)
	out := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		if b[r] != 0 {
			out = append(out, a[r]/b[r])
		}
	}
	return out
}

func values(m map[int]float64) []float64 {
	rounds := make([]int, 0, len(m))
	for r := range m {
		rounds = append(rounds, r)
	}
	slices.Sort(rounds)
	out := make([]float64, 0, len(m))
	for _, r := range rounds {
		out = append(out, m[r])
	}
	return out
}

// WriteMarkdown writes one markdown table per comparison: each variant's
// median [min..max] over the rounds, then each ratio's median [min..max] of
// per-round ratios, with the target and whether the median meets it.
func (r *Report) WriteMarkdown(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for i, c := range r.Comparisons {
		if i > 0 {
			bw.WriteString("\n")
		}
		title := c.Title
		if title == "" {
			title = c.ID
		}
		unit := c.Unit
		if unit == "" {
			unit = "value"
		}
		fmt.Fprintf(bw, "**%s** (`%s`)\n\n", title, c.ID)
		fmt.Fprintf(bw, "| %s | median %s | [min..max] | rounds | target | met |\n|---|---|---|---|---|---|\n", "variant", unit)
		for _, v := range c.Variants {
			s := c.Summary(v)
			tgt, met := "", ""
			if t := c.Targets[v]; t != nil {
				tgt, met = t.String(), verdict(s, t)
			}
			fmt.Fprintf(bw, "| %s | %s | %s | %d | %s | %s |\n", v, cell(s, s.Median), rangeCell(s), s.N, tgt, met)
		}
		for _, ra := range c.Ratios {
			s := Summarize(c.RatioValues(ra))
			tgt, met := "", ""
			if ra.Target != nil {
				tgt, met = ra.Target.String()+"×", verdict(s, ra.Target)
			}
			med := cell(s, s.Median)
			if s.N > 0 {
				med += "×"
			}
			fmt.Fprintf(bw, "| **%s ÷ %s** | %s | %s | %d | %s | %s |\n", ra.A, ra.B, med, rangeCell(s), s.N, tgt, met)
		}
		for _, n := range c.Notes {
			fmt.Fprintf(bw, "\n%s\n", n)
		}
	}
	return bw.Flush()
}

// WriteSummary writes the summary table: one row per #summary line, each
// variant's median with its unit and the median [min..max] of the
// per-round ratio (or the one variant's median [min..max]) against the
// row's goal, then the run's #meta lines. Rows whose comparison was not run
// are left out, so a partial run prints a partial table.
func (r *Report) WriteSummary(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("| measure | A | B | A ÷ B (A alone when no B), median [min..max] | goal | met |\n|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		c, ok := r.byID[row.Cmp]
		if !ok || len(c.Values[row.A]) == 0 {
			continue
		}
		a := c.Summary(row.A)
		unit := ""
		if c.Unit != "" {
			unit = " " + c.Unit
		}
		aCell := row.A + " " + cell(a, a.Median) + unit
		bCell, s := "", a
		if row.B != "" {
			b := c.Summary(row.B)
			bCell = row.B + " " + cell(b, b.Median) + unit
			s = Summarize(c.RatioValues(Ratio{A: row.A, B: row.B}))
		}
		val := cell(s, s.Median)
		if row.B != "" && s.N > 0 {
			val += "×"
		}
		val += " " + rangeCell(s) + fmt.Sprintf(" (%d rounds)", s.N)
		tgt, met := "", ""
		if row.Goal != nil {
			tgt, met = row.Goal.String(), verdict(s, row.Goal)
			if row.B != "" {
				tgt += "×"
			}
		}
		fmt.Fprintf(bw, "| %s (`%s`) | %s | %s | %s | %s | %s |\n", row.Label, row.Cmp, aCell, bCell, val, tgt, met)
	}
	if len(r.Meta) > 0 {
		bw.WriteString("\n")
		for _, m := range r.Meta {
			fmt.Fprintf(bw, "- %s: %s\n", m[0], m[1])
		}
	}
	if c, ok := r.byID["load"]; ok {
		bw.WriteString("\nLoad average (1-minute) when each comparison's rounds started, median [min..max]: ")
		for i, v := range c.Variants {
			if i > 0 {
				bw.WriteString(", ")
			}
			s := c.Summary(v)
			fmt.Fprintf(bw, "%s %s %s", v, cell(s, s.Median), rangeCell(s))
		}
		bw.WriteString("\n")
	}
	return bw.Flush()
}

func verdict(s Summary, t *Target) string {
	switch {
	case s.N == 0:
		return "no data"
	case t.Met(s.Median):
		return "yes"
	}
	return "**no**"
}

func cell(s Summary, x float64) string {
	if s.N == 0 {
		return "–"
	}
	return format(x)
}

func rangeCell(s Summary) string {
	if s.N == 0 {
		return "–"
	}
	return "[" + format(s.Min) + ".." + format(s.Max) + "]"
}

// format renders x compactly: 2.31M, 845k, 10.3k, 1.23, 0.081.
func format(x float64) string {
	a := math.Abs(x)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 2, 64) + "M"
	case a >= 1e5:
		return strconv.FormatFloat(x/1e3, 'f', 0, 64) + "k"
	case a >= 1e4:
		return strconv.FormatFloat(x/1e3, 'f', 1, 64) + "k"
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	case a >= 0.1 || a == 0:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strconv.FormatFloat(x, 'g', 2, 64)
}
