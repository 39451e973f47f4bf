package redisstore

// The readers of the strings the store's scripts return.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zmqguard/zmqguard/kvindex"
)

// parseMapKey reads the local key at the head of a map value ("key|mid:g|…").
func parseMapKey(v string) (kvindex.Key, error) {
	end := len(v)
	for i := 0; i < len(v); i++ {
		if v[i] == '|' {
			end = i
			break
		}
	}
	k, err := strconv.ParseUint(v[:end], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad map value %q", v)
	}
	return kvindex.Key(k), nil
}

// next returns the part of *s before sep and moves *s past it.
func next(s *string, sep byte) string {
	for i := 0; i < len(*s); i++ {
		if (*s)[i] == sep {
			v := (*s)[:i]
			*s = (*s)[i+1:]
			return v
		}
	}
	v := *s
	*s = ""
	return v
}

// parseEpochs reads "E,epoch,E,epoch…" into epochs indexed by engine id.
// Engine ids are handed out one by one and never forgotten, so none is
// above the number of engines listed; a larger one is refused rather than
// allocated for.
func parseEpochs(s string, epochs []string) ([]string, error) {
	limit := uint64(strings.Count(s, ",")/2 + 1)
	for s != "" {
		field := next(&s, ',')
		id, err := strconv.ParseUint(field, 10, 32)
		if err != nil || id > limit {
			return epochs, fmt.Errorf("redisstore: engine id %.20q in the epochs is not in 0..%d", field, limit)
		}
		ep := next(&s, ',')
		for uint64(len(epochs)) <= id {
			epochs = append(epochs, "")
		}
		epochs[id] = ep
	}
	return epochs, nil
}

// parseHolders reads "E:hash:M:G,epoch:seq,…" into holders (the seq is
// not read; a value without one reads the same).
func parseHolders(s string, epochs []string, hs []kvindex.Holder) ([]kvindex.Holder, error) {
	for s != "" {
		field := next(&s, ',')
		ep := next(&s, ',')
		ep, _, _ = strings.Cut(ep, ":") // "epoch:seq"
		e, err1 := strconv.ParseUint(next(&field, ':'), 10, 32)
		next(&field, ':')
		m, err2 := strconv.ParseUint(next(&field, ':'), 10, 16)
		if err1 != nil || err2 != nil {
			return hs, fmt.Errorf("bad entry field")
		}
		hs = append(hs, kvindex.Holder{Engine: uint32(e), Medium: uint16(m), Trusted: e < uint64(len(epochs)) && epochs[e] == ep})
	}
	return hs, nil
}
