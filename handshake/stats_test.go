package handshake

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestListenerStatsJSON: the listener's stats marshal as named counters
// (served by variant name, drops by reason name), never positional lists.
func TestListenerStatsJSON(t *testing.T) {
	var st ListenerStats
	st.Served[V1], st.Served[V3] = 2, 5
	st.Loop.Dropped[1] = 3
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"served":{"v1":2,"v2":0,"v3":5}`, `"error_replies":0`, `"loop":{`, `"socket":{`,
		`"dropped":{`, `"refused":{`, `"dropped_hwm":0`} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s:\n%s", want, s)
		}
	}
	if strings.Contains(s, "[") {
		t.Errorf("JSON holds a positional list:\n%s", s)
	}
	var back ListenerStats
	if err := json.Unmarshal(b, &back); err != nil || back.Served != st.Served || totalServed(back) != 7 {
		t.Fatalf("round trip: %v, %+v", err, back.Served)
	}
	if err := json.Unmarshal([]byte(`{"served":{"v4":1}}`), &back); err == nil {
		t.Fatal("unknown variant accepted")
	}
}

// totalServed is the number of requests st counts as answered with
// metadata.
func totalServed(st ListenerStats) uint64 { return st.Served[V1] + st.Served[V2] + st.Served[V3] }
