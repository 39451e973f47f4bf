package socket

import (
	"errors"
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

// ErrBadEndpoint is wrapped by every endpoint parsing error.
var ErrBadEndpoint = errors.New("socket: bad endpoint")

func badEndpoint(detail string) error {
	return errors.Join(ErrBadEndpoint, errors.New("socket: endpoint "+detail))
}

// parseEndpoint parses a ZeroMQ endpoint. For tcp the host may be "*" (every
// interface, binding only), a name, an IPv4 address or a bracketed IPv6
// address; the port is a decimal 0..65535 (0 picks a free port on bind).
// For ipc the path is taken as is (network "unix").
func parseEndpoint(s string, bind bool) (endpoint, error) {
	if len(s) > maxEndpoint {
		return endpoint{}, badEndpoint("is longer than " + strconv.Itoa(maxEndpoint) + " bytes")
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return endpoint{}, badEndpoint("has no scheme (want tcp:// or ipc://)")
	}
	switch scheme {
	case "tcp":
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return endpoint{}, badEndpoint("has no port")
		}
		host, port := rest[:i], rest[i+1:]
		if port == "" || len(port) > 5 {
			return endpoint{}, badEndpoint("port is not a number in 0..65535")
		}
		for _, c := range port {
			if c < '0' || c > '9' {
				return endpoint{}, badEndpoint("port is not a number in 0..65535")
			}
		}
		if p, _ := strconv.Atoi(port); p > 65535 {
			return endpoint{}, badEndpoint("port is not a number in 0..65535")
		}
		if strings.HasPrefix(host, "[") {
			if !strings.HasSuffix(host, "]") || len(host) < 3 {
				return endpoint{}, badEndpoint("has an unterminated IPv6 address")
			}
			host = host[1 : len(host)-1]
			if net.ParseIP(host) == nil {
				return endpoint{}, badEndpoint("has an invalid IPv6 address")
			}
		} else if strings.ContainsAny(host, "[]:/ \t\r\n") {
			return endpoint{}, badEndpoint("has an invalid host")
		}
		if host == "*" {
			if !bind {
				return endpoint{}, badEndpoint("host * is only valid for Bind")
			}
			host = ""
		}
		if host == "" && !bind {
			return endpoint{}, badEndpoint("has no host")
		}
		return endpoint{network: "tcp", address: net.JoinHostPort(host, port)}, nil
	case "ipc":
		if rest == "" {
			return endpoint{}, badEndpoint("has an empty ipc path")
		}
		if strings.IndexByte(rest, 0) >= 0 {
			return endpoint{}, badEndpoint("ipc path holds a NUL byte")
		}
		return endpoint{network: "unix", address: rest}, nil
	}
	return endpoint{}, badEndpoint("scheme is not tcp or ipc")
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
