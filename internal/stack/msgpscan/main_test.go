package msgpscan

import (
	"encoding/hex"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// hx decodes hex, ignoring spaces; it panics on a typo in a test vector.
func hx(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// Vectors from docs/protocol.md.
var (
	vecStats = hx("94019084b06e756d5f72756e6e696e675f7265717303b06e756d5f77616974696e675f7265717305ac737465705f636f756e7465722aac63757272656e745f7761766507cb40c81cd6c8b43958")
	// 8-field EngineCoreOutputs with start_wave=8 from engine 1.
	vecStartWave = hx("980190c0cb40c81cd6c8b43958c0c0c008")
	// 7-field EngineCoreOutputs with wave_complete=7 from engine 0.
	vecWaveComplete = hx("970090c0cb40c81cd6c8b43958c0c007")
	vecNixlPayload  = hx("82b2636f6d7061746962696c6974795f68617368d940" + strings.Repeat("61", 64) +
		"b46167656e745f6d657461646174615f6279746573c403010203")
)

var protocolVectors = map[string][]byte{
	"get_meta_msg":        hx("c40c6765745f6d6574615f6d7367"),
	"nixl_v3_request":     hx("93c40c6765745f6d6574615f6d73670001"),
	"nixl_v2_request":     hx("92c40c6765745f6d6574615f6d736701"),
	"timestamp":           hx("cb40c81cd6c8b43958"),
	"nixl_payload":        vecNixlPayload,
	"front_counts":        hx("939292050392000107c3"),
	"scale_elastic_ep":    hx("92b05343414c455f454c41535449435f455004"),
	"wave_nil_exclude":    hx("92c007"),
	"wave_int_exclude":    hx("920207"),
	"wave_bin_exclude":    hx("92c402020007"),
	"stats":               vecStats,
	"wave_complete":       vecWaveComplete,
	"start_wave":          vecStartWave,
	"wave_change_publish": hx("93c007c2"),
	"start_dp_wave_body":  hx("920702"),
	"subscribe":           hx("01"),
	"start_dp_wave_topic": hx("02"),
}
