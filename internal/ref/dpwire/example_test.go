package dpwire_test

import (
	"encoding/hex"
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

// ExampleParseFrontMessage parses the three kinds of front-end message.
func ExampleParseFrontMessage() {
	for _, h := range []string{
		"01",                                     // an XPUB subscription
		"92b05343414c455f454c41535449435f455004", // ("SCALE_ELASTIC_EP", 4)
		"92c402020007",                           // (b"\x02\x00", 7)
		"818001",                                 // a map keyed by a map
	} {
		b, _ := hex.DecodeString(h)
		m, err := dpwire.ParseFrontMessage(b)
		if err != nil {
			fmt.Println("drop:", decodeguard.ReasonOf(err))
			continue
		}
		fmt.Printf("%v engines=%d wave=%d exclude=%v/%d\n", m.Kind, m.Engines, m.Wave, m.HasExclude, m.Exclude)
	}
	// Output:
	// subscribe engines=0 wave=0 exclude=false/0
	// scale engines=4 wave=0 exclude=false/0
	// wake engines=0 wave=7 exclude=true/2
	// drop: decode
}
