package socket

import (
	"errors"
	"strings"
	"testing"
)

// TestEndpointErrorOneLine: a bad endpoint is one line that names it, and
// a bad Options lists every problem on one line.
func TestEndpointErrorOneLine(t *testing.T) {
	s, err := NewPull(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ep := range []string{"udp://127.0.0.1:5", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "127.0.0.1:5"} {
		err := s.Bind(ep)
		if !errors.Is(err, errBadEndpoint) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `"`+ep+`"`) {
			t.Errorf("Bind(%q) = %q", ep, err)
		}
		if strings.Count(err.Error(), "socket:") != 1 {
			t.Errorf("Bind(%q) stutters: %q", ep, err)
		}
	}
	_, err = NewPull(Options{HWM: -1, BudgetWait: -1})
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "HWM") || !strings.Contains(err.Error(), "BudgetWait") {
		t.Errorf("bad Options: %q", err)
	}
}
