package kvevents

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// replayEndSeq is the sequence number of the replay end marker
// (["", topic, ffffffffffffffff, ""], -1 as a signed 8-byte big-endian
// number; vLLM PR #45177): every buffered batch from start_seq on was sent.
//
// replayErrorSeq is the sequence number of the replay error marker, sent
// with the same layout (["", topic, fffffffffffffffe, ""], or without the
// topic frame for releases before #45177) instead of the end marker when the
// replay is incomplete: a reply was dropped (the client's queue was full or
// past its fair share of the send budget, or the client left), or the
// request came sooner than PublisherConfig.ReplayInterval after the
// connection's previous replay. Replies stop at the first drop, so what the
// client received before the error marker is contiguous from start_seq; it
// should ask again from the next sequence it needs. This marker is
// zmqguard's own: vLLM's publisher never sends it, and vLLM's example
// subscriber, which ends a replay on an empty payload, stops on it as on
// the end marker. If even the error marker cannot be queued, nothing is
// sent and the client's replay timeout applies.
const (
	replayEndSeq   uint64 = 0xffffffffffffffff
	replayErrorSeq uint64 = 0xfffffffffffffffe
)

// offsetPort returns endpoint with its port raised by rank, as vLLM does
// for each DP rank's publisher (ZmqEventPublisher.offset_endpoint_port):
// tcp endpoints get port+rank, inproc ones a "_dp<rank>" suffix; rank 0 and
// "" are returned unchanged.
func offsetPort(endpoint string, rank int) (string, error) {
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	if strings.Contains(endpoint, "inproc") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	if !strings.Contains(endpoint, "tcp") {
		return "", fmt.Errorf("kvevents: cannot offset %q by a DP rank: not tcp or inproc", endpoint)
	}
	i := strings.LastIndexByte(endpoint, ':')
	if i < 0 {
		return endpoint, nil
	}
	port, err := strconv.Atoi(endpoint[i+1:])
	if err != nil {
		return "", fmt.Errorf("kvevents: endpoint %q has no numeric port", endpoint)
	}
	return endpoint[:i+1] + strconv.Itoa(port+rank), nil
}

// bindsByRule reports vLLM's bind-or-connect heuristic for a PUB endpoint.
func bindsByRule(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") ||
		strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}

// parseRequest checks a replay request as the ROUTER receives it:
// [identity, "", start_seq (8 bytes big-endian)], the only form vLLM's
// _service_replay serves.
func parseRequest(f [][]byte) (id []byte, start uint64, err error) {
	if len(f) != 3 || len(f[1]) != 0 {
		return nil, 0, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay request of %d frames, want [identity, \"\", start_seq]", len(f)))
	}
	if len(f[2]) != 8 {
		return nil, 0, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay start_seq of %d bytes, want 8", len(f[2])))
	}
	return f[0], binary.BigEndian.Uint64(f[2]), nil
}

// parseLive checks one live message [topic, seq, payload] and returns its
// sequence number and payload.
func parseLive(frames [][]byte, maxPayload int) (uint64, []byte, error) {
	if len(frames) != 3 {
		return 0, nil, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: live message of %d frames, want 3 [topic, seq, payload]", len(frames)))
	}
	if len(frames[1]) != 8 {
		return 0, nil, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: sequence frame of %d bytes, want 8", len(frames[1])))
	}
	if len(frames[2]) > maxPayload {
		return 0, nil, decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: payload of %d bytes over the %d-byte limit", len(frames[2]), maxPayload))
	}
	return binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// parseReply checks one replay reply as a DEALER receives it: ["", topic,
// seq, payload] since vLLM PR #45177 (v0.26.0), ["", seq, payload] before;
// end reports the end marker (seq 0xffffffffffffffff) or the error marker
// (replayErrorSeq, returned as seq). A topic frame must
// be prefixed by the subscription topic.
func parseReply(f [][]byte, topic string, maxPayload int) (seq uint64, payload []byte, end bool, err error) {
	var seqb, tp []byte
	switch {
	case len(f) == 4 && len(f[0]) == 0:
		tp, seqb, payload = f[1], f[2], f[3]
	case len(f) == 3 && len(f[0]) == 0:
		seqb, payload = f[1], f[2]
	default:
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay reply of %d frames, want [\"\", topic, seq, payload] or [\"\", seq, payload]", len(f)))
	}
	if len(seqb) != 8 {
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay sequence frame of %d bytes, want 8", len(seqb)))
	}
	seq = binary.BigEndian.Uint64(seqb)
	if seq == endSeq || seq == replayErrorSeq {
		return seq, nil, true, nil
	}
	if tp != nil && (len(tp) < len(topic) || string(tp[:len(topic)]) != topic) {
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonValidate,
			"kvevents: replayed batch with a topic outside the subscription")
	}
	if len(payload) > maxPayload {
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: replayed payload of %d bytes over the %d-byte limit", len(payload), maxPayload))
	}
	return seq, payload, false, nil
}
