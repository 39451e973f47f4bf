package kvevents

// Gates keep the Handler's calls for one name one at a time, in order,
// across two sources of that name: a source added under the name of one
// Remove is still stopping (Subscriber.gates), or a fan-in engine created
// for the topic of one being retired (fanIn.retiring), waits before its
// first delivery until the old one's last update (its UpdateDeparted) has
// returned. A source's gates are closed once those updates are done.

// waitGates waits for the source's gates, the turn held (lock), then
// forgets them. The wait is bounded by the old source's stop: its Handler
// call under way returns (its ctx is cancelled), and its UpdateDeparted is
// skipped once the Subscriber closes.
func (so *source) waitGates() {
	if so.gates == nil {
		return
	}
	for _, g := range so.gates {
		<-g
	}
	so.gates = nil
}
