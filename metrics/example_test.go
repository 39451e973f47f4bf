package metrics_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/metrics"
)

// A source set with a label cap of 2: the third source is counted under
// source="other".
func ExampleSet_AddSources() {
	set := metrics.NewSet()
	var bad decodeguard.Counts
	bad[decodeguard.ReasonDecode] = 1
	_ = set.AddSources("kv-events", 2, func() []metrics.Source {
		return []metrics.Source{
			{Name: "tcp://10.0.0.1:5557", Received: 10, Connected: true},
			{Name: "tcp://10.0.0.2:5557", Received: 20, Connected: true},
			{Name: "tcp://10.0.0.3:5557", Received: 30, Dropped: bad},
		}
	})
	set.Collect(func(s metrics.Sample) {
		if s.Family.Name == "zmqguard_source_messages_received_total" || s.Family.Name == "zmqguard_sources_folded" {
			fmt.Println(s.Family.Name, s.Labels, s.Value)
		}
	})
	// Output:
	// zmqguard_source_messages_received_total [kv-events tcp://10.0.0.1:5557] 10
	// zmqguard_source_messages_received_total [kv-events tcp://10.0.0.2:5557] 20
	// zmqguard_source_messages_received_total [kv-events other] 30
	// zmqguard_sources_folded [kv-events] 1
}
