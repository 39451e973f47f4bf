package redisstore

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// dial makes a client for url (a cluster client when url's seeds are a
// cluster's), without client-side caching.
func dial(url string, timeout time.Duration) (rueidis.Client, error) {
	opt, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DisableCache = true // no client-side caching: every read sees the server
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = timeout
	}
	opt.ConnWriteTimeout = timeout
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redisstore: connect %q: %v", url, err)
	}
	return c, nil
}

// parseURL reads a redis URL, whose host part may list several seed
// addresses of a cluster separated by commas
// (redis://127.0.0.1:7000,127.0.0.1:7001/0).
func parseURL(raw string) (rueidis.ClientOption, error) {
	u := raw
	var seeds []string
	if scheme, rest, ok := strings.Cut(raw, "://"); ok && (scheme == "redis" || scheme == "rediss" || scheme == "valkey" || scheme == "valkeys") {
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		auth := rest[:end]
		user := ""
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			user, auth = auth[:at+1], auth[at+1:]
		}
		if strings.Contains(auth, ",") {
			seeds = strings.Split(auth, ",")
			for _, a := range seeds {
				if _, _, err := net.SplitHostPort(a); err != nil {
					return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL %q: seed address %q is not host:port", raw, a)
				}
			}
			u = scheme + "://" + user + seeds[0] + rest[end:]
		}
	}
	opt, err := rueidis.ParseURL(u)
	if err != nil {
		return opt, fmt.Errorf("redisstore: URL %q: %v", raw, err)
	}
	if len(seeds) > 1 {
		opt.InitAddress = append(opt.InitAddress, seeds[1:]...)
	}
	return opt, nil
}

// hasHashTag reports whether prefix holds a Redis Cluster hash tag: a
// "{" followed later by a "}" with something between them.
func hasHashTag(prefix string) bool {
	i := strings.IndexByte(prefix, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(prefix[i+1:], '}')
	return j > 0
}
