package main

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

// probeReportJSON is the --json form of a probe report: named fields,
// durations as Go duration strings, peer-sent strings as they are when
// nixlwire.SafeText finds them safe, else as its length and hex prefix
// (see jsonText).
type probeReportJSON struct {
	Endpoint          string          `json:"endpoint"`
	Variant           string          `json:"variant"`
	PP                int             `json:"pp"`
	TP                int             `json:"tp"`
	OK                bool            `json:"ok"`
	FailedStep        string          `json:"failed_step,omitempty"`
	Error             string          `json:"error,omitempty"`
	Steps             []probeStepJSON `json:"steps"`
	PeerType          string          `json:"peer_type,omitempty"`
	ReplyFrames       []int           `json:"reply_frames,omitempty"`
	CompatibilityHash string          `json:"compatibility_hash,omitempty"`
	EngineID          string          `json:"engine_id,omitempty"`
	RemoteTime        float64         `json:"remote_time,omitempty"`
	ConnectTime       string          `json:"connect_time"`
	HandshakeTime     string          `json:"handshake_time"`
	RTT               string          `json:"rtt"`
}

type probeStepJSON struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Detail   string `json:"detail"`
	Duration string `json:"duration"`
}

// jsonText renders a peer-sent string for a JSON field: the string itself
// when nixlwire.SafeText finds it safe (at most 128 bytes of printable
// ASCII; json.Marshal does the escaping, so no quotes of SafeText's own end
// up inside the JSON string), else SafeText's length and hex prefix.
func jsonText(s string) string {
	q := nixlwire.SafeText(s)
	if u, err := strconv.Unquote(q); err == nil && u == s {
		return s
	}
	return q
}

// probeJSON runs the probe and prints its report as one JSON line.
func probeJSON(ctx context.Context, e *env, ep string, req handshake.Request, opts handshake.ProbeOptions) error {
	rep, err := handshake.Probe(ctx, ep, req, opts)
	out := probeReportJSON{
		Endpoint: rep.Endpoint, Variant: rep.Request.Variant.String(), PP: rep.Request.PP, TP: rep.Request.TP,
		OK: rep.OK, PeerType: string(rep.PeerType), ReplyFrames: rep.ReplyFrames,
		ConnectTime: rep.ConnectTime.String(), HandshakeTime: rep.HandshakeTime.String(), RTT: rep.RTT.String(),
		RemoteTime: rep.RemoteTime, Steps: []probeStepJSON{},
	}
	if rep.CompatibilityHash != "" {
		out.CompatibilityHash = jsonText(rep.CompatibilityHash)
	}
	if rep.EngineID != "" {
		out.EngineID = jsonText(rep.EngineID)
	}
	for _, s := range rep.Steps {
		out.Steps = append(out.Steps, probeStepJSON{Name: s.Name, OK: s.OK, Detail: s.Detail, Duration: s.Duration.String()})
		if !s.OK {
			out.FailedStep = s.Name
		}
	}
	if err != nil {
		out.Error = err.Error()
	}
	b, merr := json.Marshal(out)
	if merr != nil {
		return merr
	}
	if _, werr := e.stdout.Write(append(b, '\n')); werr != nil {
		return werr
	}
	return err
}
