package zmtpguard

import (
	"testing"

	"go.uber.org/goleak"
)

// zmq4's PUB and XPUB sockets leak one writer goroutine each (pub.go: the
// writer's Close only signals a goroutine that waits in a loop); the
// transport tests use a zmq4 XPUB, so that one function is ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
