package zmtpwire_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/internal/zmtpwire"
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
