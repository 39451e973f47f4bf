package sockopt_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/internal/ref/sockopt"
	"github.com/zmqguard/zmqguard/socket"
)

// An engine output receiver's defaults: 4096 frames and 64 MiB messages,
// unless the user chose otherwise.
func ExampleApply() {
	var user socket.Options
	user.Guard.MaxFrames = 8192
	o, _ := sockopt.Apply(user, sockopt.Overrides{MaxFrames: 4096, MaxMessageSize: 64 << 20})
	fmt.Println(o.Guard.MaxFrames, o.Guard.MaxMessageSize)
	// Output: 8192 67108864
}
