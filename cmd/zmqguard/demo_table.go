package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
)

// demoStatus renders the live one-line status.
func demoStatus(elapsed, total time.Duration, cs coordinator.Stats, ls handshake.ListenerStats, c *demoCounters) string {
	lsViol := decodeguard.Counts(ls.Socket.Refused)
	drops := cs.Dropped + cs.Refused.Total() + ls.Loop.Dropped.Total() + lsViol.Total()
	return fmt.Sprintf("demo %s/%s | coordinator %d outputs, %d pubs, wave %d | handshakes %d | scanner %d probes, %d deaths | drops %d | crashes %d",
		elapsed.Truncate(time.Second), total, cs.BackOutput.Accepted, cs.StatsPublished+cs.WavePublished, cs.Wave,
		c.fetchOK.Load(), c.probes.Load(), c.deaths.Load(), drops, c.crashes.Load())
}

// writeDemoTable prints the final table.
func writeDemoTable(w io.Writer, elapsed time.Duration, front, backOut, backPub, hs string, answers []bool,
	cs coordinator.Stats, ls handshake.ListenerStats, c *demoCounters, rep *hostile.Report) {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	probes := c.probes.Load()
	fmt.Fprintf(w, "zmqguard demo: %s on loopback; the built-in scanner sent %d hostile probes at 4 ports\n\n",
		elapsed.Round(100*time.Millisecond), probes)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tENDPOINT\tMESSAGES SERVED\tSENT\tMSGS DROPPED\tCONNS REFUSED\tANSWERS AT END")
	row := func(name, ep string, served, sent, dropped, refused uint64, ans bool) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", name, ep, served, sent, dropped, refused, yes(ans))
	}
	lsViol := decodeguard.Counts(ls.Socket.Refused)
	row("coordinator front (XPUB)", front, cs.Front.Accepted, cs.Front.Sent, cs.Front.Dropped, cs.Front.Refused.Total(), answers[0])
	row("coordinator back-output (PULL)", backOut, cs.BackOutput.Accepted, cs.BackOutput.Sent, cs.BackOutput.Dropped, cs.BackOutput.Refused.Total(), answers[1])
	row("coordinator back-publish (XPUB)", backPub, cs.BackPublish.Accepted, cs.BackPublish.Sent, cs.BackPublish.Dropped, cs.BackPublish.Refused.Total(), answers[2])
	row("handshake listener (ROUTER)", hs, ls.Served[handshake.V1]+ls.Served[handshake.V2]+ls.Served[handshake.V3], ls.Socket.Sent, ls.Loop.Dropped.Total(), lsViol.Total(), answers[3])
	tw.Flush()

	fmt.Fprintln(w, "\nDrops by reason (messages dropped + connections refused):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REASON\tFRONT\tBACK-OUTPUT\tBACK-PUBLISH\tHANDSHAKE\tTOTAL")
	cols := []decodeguard.Counts{
		sumDrops(cs.Front.Drops, cs.Front.Refused),
		sumDrops(cs.BackOutput.Drops, cs.BackOutput.Refused),
		sumDrops(cs.BackPublish.Drops, cs.BackPublish.Refused),
		sumDrops(decodeguard.Counts(ls.Loop.Dropped), lsViol),
	}
	var grand uint64
	for _, r := range decodeguard.Reasons() {
		var total uint64
		for _, col := range cols {
			total += col[r]
		}
		if total == 0 {
			continue
		}
		grand += total
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", r, cols[0][r], cols[1][r], cols[2][r], cols[3][r], total)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\n", cols[0].Total(), cols[1].Total(), cols[2].Total(), cols[3].Total(), grand)
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "coordinator:\t%d engine outputs taken, %d stats and %d wave publications, %d READY and %d START_DP_WAVE sent, wave %d\n",
		cs.StatsApplied, cs.StatsPublished, cs.WavePublished, cs.ReadySent, cs.StartWaveSent, cs.Wave)
	fmt.Fprintf(tw, "front-end:\t%d publications received, %d wake-ups sent\n", c.publications.Load(), c.wakes.Load())
	fmt.Fprintf(tw, "engines:\t%d messages pushed, %d START_DP_WAVE received\n", c.engineMsgs.Load(), c.startWaves.Load())
	fmt.Fprintf(tw, "handshakes completed:\t%d (V1 %d, V2 %d, V3 %d served); %d unserved-rank requests rejected as expected; %d failed\n",
		c.fetchOK.Load(), ls.Served[handshake.V1], ls.Served[handshake.V2], ls.Served[handshake.V3], c.rejected.Load(), c.fetchFail.Load())
	passes := 0
	if rep != nil && len(rep.Passes) > 0 {
		passes = rep.Passes[0]
		for _, p := range rep.Passes {
			passes = min(passes, p)
		}
	}
	fmt.Fprintf(tw, "hostile probes:\t%d sent (%d complete pass(es) over the corpus per port); %s\n",
		probes, passes, deathsText(c.deaths.Load()))
	fmt.Fprintf(tw, "crashes:\t%d\n", c.crashes.Load())
	tw.Flush()
	if rep != nil && !rep.OK() {
		fmt.Fprintln(w, "\nProbes after which a port stopped answering:")
		var b strings.Builder
		for _, r := range rep.Results {
			if !r.Alive() {
				fmt.Fprintf(&b, "  %s %s: %s\n", r.Target, r.Probe, r.LastError)
			}
		}
		io.WriteString(w, b.String())
	}
}

func sumDrops(a, b decodeguard.Counts) decodeguard.Counts {
	for i := range a {
		a[i] += b[i]
	}
	return a
}
