package metrics

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// metricsModules are the module path prefixes no library package may build.
var metricsModules = []string{"github.com/prometheus/", "go.opentelemetry.io/"}

// adapterDirs are the parts of the module that may import metrics
// libraries: programs, examples, benchmarks and the adapters themselves.
var adapterDirs = []string{"cmd/", "examples/", "bench/", "metrics/zgprom", "metrics/zgotel"}

// TestLibraryBuildsNoMetricsDependency runs `go list` over every package of
// the workspace (go.work: the library and the modules of cmd/, examples/
// and the adapters) and fails if a library package (anything outside adapterDirs,
// this package included) depends, directly or not, on a Prometheus or
// OpenTelemetry package: embedding zmqguard must never build one.
func TestLibraryBuildsNoMetricsDependency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "github.com/zmqguard/zmqguard/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/zmqguard/zmqguard/"
	library, adapters := 0, 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, deps := fields[0], fields[1:]
		var bad []string
		for _, d := range deps {
			for _, m := range metricsModules {
				if strings.HasPrefix(d, m) {
					bad = append(bad, d)
				}
			}
		}
		isAdapter := false
		for _, a := range adapterDirs {
			if strings.HasPrefix(pkg, mod+a) {
				isAdapter = true
			}
		}
		switch {
		case isAdapter:
			if pkg == mod+"metrics/zgprom" && len(bad) == 0 {
				t.Errorf("the check finds nothing: %s lists no Prometheus dependency", pkg)
			}
			adapters++
		case len(bad) > 0:
			t.Errorf("library package %s depends on %s", pkg, strings.Join(bad, ", "))
		default:
			library++
		}
	}
	// The module's core packages must have been among those checked.
	for _, core := range []string{"decodeguard", "loop", "socket", "zmtpguard", "handshake", "coordinator", "metrics"} {
		if !strings.Contains(string(out), mod+core+" ") && !strings.Contains(string(out), mod+core+"\n") {
			t.Errorf("package %s was not listed", mod+core)
		}
	}
	if library < 10 || adapters < 2 {
		t.Errorf("checked %d library and %d adapter packages; want at least 10 and 2", library, adapters)
	}
	t.Logf("%d library packages build no metrics dependency (%d programs and adapters may)", library, adapters)
}
