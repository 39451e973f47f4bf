package socket

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// endpoint is a parsed "tcp://host:port" or "ipc://path".
type endpoint struct {
	network string // "tcp" or "unix"
	address string // host:port or path
}

// maxEndpoint bounds the length of an endpoint string.
const maxEndpoint = 1024

// errBadEndpoint is wrapped by every endpoint parsing error.
var errBadEndpoint = errors.New("socket: bad endpoint")

// badEndpoint returns a one-line error naming the endpoint s (quoted and
// capped) and what is wrong with it; it wraps errBadEndpoint.
func badEndpoint(s, detail string) error {
	if len(s) > 128 {
		s = s[:128] + "..."
	}
	return fmt.Errorf("%w %s: %s", errBadEndpoint, strconv.Quote(s), detail)
}

// parseEndpoint parses a ZeroMQ endpoint. For tcp the host may be "*" (every
// interface, binding only), a name, an IPv4 address or a bracketed IPv6
// address; the port is a decimal 0..65535 (0 picks a free port on bind).
// For ipc the path is taken as is (network "unix").
func parseEndpoint(s string, bind bool) (endpoint, error) {
	if len(s) > maxEndpoint {
		return endpoint{}, badEndpoint(s, "is longer than "+strconv.Itoa(maxEndpoint)+" bytes")
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return endpoint{}, badEndpoint(s, "has no scheme (want tcp:// or ipc://)")
	}
	switch scheme {
	case "tcp":
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return endpoint{}, badEndpoint(s, "has no port")
		}
		host, port := rest[:i], rest[i+1:]
		if port == "" || len(port) > 5 {
			return endpoint{}, badEndpoint(s, "port is not a number in 0..65535")
		}
		for _, c := range port {
			if c < '0' || c > '9' {
				return endpoint{}, badEndpoint(s, "port is not a number in 0..65535")
			}
		}
		if p, _ := strconv.Atoi(port); p > 65535 {
			return endpoint{}, badEndpoint(s, "port is not a number in 0..65535")
		}
		if strings.HasPrefix(host, "[") {
			if !strings.HasSuffix(host, "]") || len(host) < 3 {
				return endpoint{}, badEndpoint(s, "has an unterminated IPv6 address")
			}
			host = host[1 : len(host)-1]
			if net.ParseIP(host) == nil {
				return endpoint{}, badEndpoint(s, "has an invalid IPv6 address")
			}
		} else if strings.ContainsAny(host, "[]:/ \t\r\n") {
			return endpoint{}, badEndpoint(s, "has an invalid host")
		}
		if host == "*" {
			if !bind {
				return endpoint{}, badEndpoint(s, "host * is only valid for Bind")
			}
			host = ""
		}
		if host == "" && !bind {
			return endpoint{}, badEndpoint(s, "has no host")
		}
		return endpoint{network: "tcp", address: net.JoinHostPort(host, port)}, nil
	case "ipc":
		if rest == "" {
			return endpoint{}, badEndpoint(s, "has an empty ipc path")
		}
		if strings.IndexByte(rest, 0) >= 0 {
			return endpoint{}, badEndpoint(s, "ipc path holds a NUL byte")
		}
		return endpoint{network: "unix", address: rest}, nil
	}
	return endpoint{}, badEndpoint(s, "scheme is not tcp or ipc")
}

// endpointString renders a bound address as an endpoint.
func endpointString(a net.Addr) string {
	if a == nil {
		return ""
	}
	switch a.Network() {
	case "unix":
		return "ipc://" + a.String()
	default:
		return "tcp://" + a.String()
	}
}
