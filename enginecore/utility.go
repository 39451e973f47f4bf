package enginecore

import (
	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// EEPNotification is an elastic-EP notification: the utility output an
// engine sends unasked under call id -1 when it
// has switched to a new parallel setup or is shutting down in a scale-down
// (vLLM's DPEngineCoreProc._eep_send_engine_core_notification, PR #34861).
// Its result is the tuple (notification type, data-parallel rank).
type EEPNotification struct {
	// Type is the EEPNotificationType value: "RECONFIGURE_FINISHED" or
	// "SHUTDOWN_COMPLETE" (other values from a later vLLM are kept as sent).
	Type string
	// DPRank is the sending engine's data-parallel rank.
	DPRank int64
}

// vLLM's EEPNotificationType values.
const (
	eepReconfigureFinished = "RECONFIGURE_FINISHED"
	eepShutdownComplete    = "SHUTDOWN_COMPLETE"
)

// FTStatus is a fault-tolerance status push: the utility output an engine's
// sentinel sends unasked under call id -2 when its
// health changes (vLLM's EngineCoreSentinel._push_status, PR #44428). Its
// result is the map {"id": engine index, "status": "healthy" | "dead" |
// "unhealthy", "fault_info": str (unhealthy only)}.
type FTStatus struct {
	// Engine is the "id" key: the engine's index.
	Engine int64
	// Status is EngineStatusType's name in lower case.
	Status string
	// FaultInfo is "fault_info", sent with an unhealthy status.
	HasFaultInfo bool
	FaultInfo    string
}

// SpecialValue returns the typed value of a utility output sent under a
// negative call id: an [EEPNotification] for -1, an [FTStatus] for -2. ok
// is false for a reply to a call (Special 0) and for a negative call id
// this package does not know; err is a ReasonValidate *decodeguard.Error
// when the result does not have the shape vLLM gives it. Strings are
// copied: the values outlive the frames.
func (u *UtilityOutput) SpecialValue() (v any, ok bool, err error) {
	switch u.Special {
	case callIDEEPNotification:
		n, err := u.eepNotification()
		return n, err == nil, err
	case callIDFTStatus:
		s, err := u.ftStatus()
		return s, err == nil, err
	}
	return nil, false, nil
}

func badSpecial(what string) error {
	return decodeguard.NewError(decodeguard.ReasonValidate, "utility_output call_id "+what)
}

// eepNotification decodes the result of an elastic-EP notification
// (Special == callIDEEPNotification): [type str, dp_rank int].
func (u *UtilityOutput) eepNotification() (EEPNotification, error) {
	const what = "-1 (elastic-EP notification): result is not [type str, dp_rank int]"
	if u.Special != callIDEEPNotification || !u.HasResult {
		return EEPNotification{}, badSpecial(what)
	}
	b := []byte(u.Result)
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 2 {
		return EEPNotification{}, badSpecial(what)
	}
	typ, b, err := msgp.ReadStringZC(b)
	if err != nil {
		return EEPNotification{}, badSpecial(what)
	}
	rank, _, err := readInt(b)
	if err != nil || rank < 0 {
		return EEPNotification{}, badSpecial(what)
	}
	return EEPNotification{Type: string(typ), DPRank: rank}, nil
}

// ftStatus decodes the result of a fault-tolerance status push (Special ==
// callIDFTStatus): a map with str keys "id" (int), "status" (str) and
// optionally "fault_info" (str); other keys are skipped.
func (u *UtilityOutput) ftStatus() (FTStatus, error) {
	const what = "-2 (fault-tolerance status): result is not {id int, status str[, fault_info str]}"
	if u.Special != callIDFTStatus || !u.HasResult {
		return FTStatus{}, badSpecial(what)
	}
	b := []byte(u.Result)
	n, b, err := readMapHeader(b)
	if err != nil {
		return FTStatus{}, badSpecial(what)
	}
	var s FTStatus
	var hasID, hasStatus bool
	for range n {
		var k, v []byte
		if k, b, err = msgp.ReadStringZC(b); err != nil {
			return FTStatus{}, badSpecial(what)
		}
		switch string(k) {
		case "id":
			s.Engine, b, err = readInt(b)
			hasID = true
		case "status":
			v, b, err = msgp.ReadStringZC(b)
			s.Status, hasStatus = string(v), true
		case "fault_info":
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			v, b, err = msgp.ReadStringZC(b)
			s.FaultInfo, s.HasFaultInfo = string(v), true
		default:
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return FTStatus{}, badSpecial(what)
		}
	}
	if !hasID || !hasStatus || s.Engine < 0 {
		return FTStatus{}, badSpecial(what)
	}
	return s, nil
}

func (d *decoder) utility(orig, b []byte) ([]byte, error) {
	const what = "EngineCoreOutputs.utility_output"
	u := &d.m.Utility
	*u = UtilityOutput{}
	at := b
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 1 {
		return b, fail(orig, at, what+": want [call_id, failure_message, result]", err)
	}
	for i := uint32(0); i < n; i++ {
		at = b
		var detail string
		switch i {
		case 0:
			detail = what + ".call_id: want an int"
			if len(b) > 0 && (b[0] >= 0xe0 || (b[0] >= 0xd0 && b[0] <= 0xd3)) {
				// A negative call id (a signed msgpack int): vLLM's
				// notifications. A signed width holding a non-negative
				// value is an ordinary id.
				var v int64
				if v, b, err = msgp.ReadInt64Bytes(b); err == nil {
					if v < 0 {
						u.Special = v
					} else {
						u.CallID = uint64(v)
					}
				}
				break
			}
			u.CallID, b, err = msgp.ReadUint64Bytes(b)
		case 1:
			detail = what + ".failure_message: want nil or a str"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			u.HasFailure = true
			u.FailureMessage, b, err = str(orig, b, detail)
		case 2:
			detail = what + ".result: want nil or [type_info, value]"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			var k uint32
			k, b, err = msgp.ReadArrayHeaderBytes(b)
			if err == nil && k != 2 {
				return b, failf(orig, at, decodeguard.ReasonDecode, detail)
			}
			if err == nil {
				u.HasResult = true
				u.ResultType, b, err = d.raw(orig, b)
			}
			if err == nil {
				var v []byte
				v, b, err = d.raw(orig, b)
				if v == nil {
					v = nilRaw
				}
				u.Result = v
			}
		default:
			detail = what + ": malformed extra field"
			_, b, err = d.raw(orig, b)
		}
		if err != nil {
			return b, fail(orig, at, detail, err)
		}
	}
	return b, nil
}

// nilRaw is the msgpack encoding of nil, for a utility result whose value
// is None (Result stays non-nil so that HasResult round-trips).
var nilRaw = []byte{0xc0}
