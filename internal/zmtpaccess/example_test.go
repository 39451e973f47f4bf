package zmtpaccess_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/zmtpaccess"
	"github.com/zmqguard/zmqguard/internal/zmtpwire"
)

// The hostile corpus reads a peer's greeting and READY with zmtpguard's own
// parsers: a frame header that claims more than the limit is refused before
// anything is allocated.
func Example() {
	g := zmtpwire.LocalGreeting()
	fmt.Println("greeting:", zmtpaccess.CheckGreeting(g[:]))
	_, _, err := zmtpaccess.ParseFrameHeader([]byte{zmtpwire.FlagLong, 0, 0, 1, 0, 0, 0, 0, 0}, 1<<20)
	fmt.Println("2^40-byte frame:", decodeguard.ReasonOf(err))
	// Output:
	// greeting: <nil>
	// 2^40-byte frame: oversize
}
