//go:build unix

package main

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// closedEndpoint returns a loopback TCP endpoint on which nothing listens
// and nothing can start listening while the test runs: a socket bound to a
// port the kernel chose, never put into listen. A connect to it is refused
// (RST). Listening on port 0 and closing would free the port for any other
// test on the machine to take before this one dials it.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("getsockname: %T, want an IPv4 address", sa)
	}
	return "tcp://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
