//go:build !unix

package main

import (
	"net"
	"testing"
)

// closedEndpoint returns a loopback TCP endpoint on which nothing listens:
// here a port the kernel chose, listened on and closed (on unix systems the
// port stays held by a bound socket; see closedport_unix_test.go).
func closedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	ln.Close()
	return ep
}
