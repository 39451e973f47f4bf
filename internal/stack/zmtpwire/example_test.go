package zmtpwire_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// A frame header's first byte says how long the header is, and the table
// says which socket types may talk.
func Example() {
	fmt.Println(zmtpwire.HeaderLen(zmtpwire.FlagCommand), zmtpwire.HeaderLen(zmtpwire.FlagLong|zmtpwire.FlagMore))
	fmt.Println(zmtpwire.Compatible("PULL", "PUSH"), zmtpwire.Compatible("PULL", "SUB"))
	// Output:
	// 2 9
	// true false
}

// The parsers read a peer's bytes before anything is allocated: a frame
// header that claims more than the limit is refused with its reason.
func ExampleParseFrameHeader() {
	g := zmtpwire.LocalGreeting()
	fmt.Println("greeting:", zmtpwire.CheckGreeting(g[:], false))
	_, _, err := zmtpwire.ParseFrameHeader([]byte{zmtpwire.FlagLong, 0, 0, 1, 0, 0, 0, 0, 0}, 1<<20)
	fmt.Println("2^40-byte frame:", decodeguard.ReasonOf(err))
	// Output:
	// greeting: <nil>
	// 2^40-byte frame: oversize
}
