package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/missingpeer"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

// dashboardExprs returns every PromQL expression of the committed Grafana
// dashboard, and its panel count.
func dashboardExprs(t *testing.T) ([]string, int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("dashboard", "zmqguard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard/zmqguard.json: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if d.UID == "" {
		t.Error("the dashboard has no uid")
	}
	return exprs, len(d.Panels)
}

// TestDashboardQueriesKnownFamilies: every metric the dashboard queries is
// one of Families() and every grouping label is one of the four (or job,
// instance, which Prometheus adds); the drop, handshake, peer and
// queue-depth families the README picture shows are all on it.
func TestDashboardQueriesKnownFamilies(t *testing.T) {
	exprs, panels := dashboardExprs(t)
	if panels < 8 {
		t.Errorf("%d panels, want at least 8", panels)
	}
	known := map[string]bool{}
	for _, f := range Families() {
		known[f.Name] = true
	}
	labels := map[string]bool{labelSocket: true, labelReason: true, labelLoop: true, labelSource: true, "job": true, "instance": true}
	used := map[string]bool{}
	metricRE := regexp.MustCompile(`zmqguard_[a-z_]+`)
	byRE := regexp.MustCompile(`by \(([^)]*)\)`)
	for _, e := range exprs {
		for _, m := range metricRE.FindAllString(e, -1) {
			if !known[m] {
				t.Errorf("dashboard queries %s, which no family has: %s", m, e)
			}
			used[m] = true
		}
		for _, g := range byRE.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(g[1], ",") {
				if l = strings.TrimSpace(l); !labels[l] {
					t.Errorf("dashboard groups by label %q, not one of the metrics' labels: %s", l, e)
				}
			}
		}
	}
	for _, f := range []*Family{loopDropped, socketRefused, handshakeServed, socketPeers, socketDroppedHWM, sourceDropped, zmtpPending,
		socketSendQueueBytes, socketReceiveQueueBytes, socketHeartbeatTimeouts} {
		if !used[f.Name] {
			t.Errorf("the dashboard has no panel for %s", f.Name)
		}
	}
}

// TestDashboardPromQL parses every dashboard query with promtool (as
// recording rules, Grafana's variables replaced by values), so a typo in a
// query fails here rather than in someone's Grafana.
func TestDashboardPromQL(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		missingpeer.Skip(t, "promtool not found ("+err.Error()+")", "prometheus")
	}
	exprs, _ := dashboardExprs(t)
	var rules bytes.Buffer
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range exprs {
		e = strings.NewReplacer("$__rate_interval", "1m", "$job", ".*").Replace(e)
		q, _ := json.Marshal(e) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "  - record: zmqguard:dashboard_query:%d\n    expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(path, rules.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", path).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(fmt.Sprintf("%d rules found", len(exprs)))) {
		t.Errorf("promtool check rules: %v\n%s\n%s", err, out, rules.String())
	}
}

// TestRenderScript re-draws the README picture from the committed samples
// of a real demo run, with the script that made it.
func TestRenderScript(t *testing.T) {
	py := pypeer.Require(t, "matplotlib", "prometheus_client")
	out := filepath.Join(t.TempDir(), "demo.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("dashboard", "render.py"),
		"--from-samples", filepath.Join("dashboard", "demo-samples.csv.gz"), "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render.py: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 20000 {
		t.Fatalf("render.py wrote %d bytes, not a PNG picture", len(b))
	}
}
