package redisstore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// SavePosition implements kvindex.PositionStore: one script call sets the
// source's field of the positions hash, in the store's generation.
func (s *store) SavePosition(source string, p kvevents.Position) error {
	if s.isClosed() {
		return kvindex.ErrClosed
	}
	return s.setPosition("SavePosition", source, strconv.FormatUint(p.Seq, 10)+":"+strconv.FormatUint(p.Digest, 10))
}

// DropPosition implements kvindex.PositionStore: one script call removes
// the source's field of the positions hash.
func (s *store) DropPosition(source string) error {
	if s.isClosed() {
		return kvindex.ErrClosed
	}
	return s.setPosition("DropPosition", source, "")
}

// setPosition sets (v != "") or removes (v == "") a source's position.
func (s *store) setPosition(call, source, v string) error {
	return s.run(call, func(g *generation) (bool, error) {
		ctx, cancel := s.ctx()
		defer cancel()
		n, err := s.posSet.Exec(ctx, s.client, s.keys, []string{s.prefix, g.token, source, v}).AsInt64()
		if err := s.count(err); err != nil {
			return false, fmt.Errorf("redisstore: %s %.80q: %w", call, source, err)
		}
		return n == 0, nil
	})
}

// Positions implements kvindex.PositionStore: one script call reads the
// positions hash, in the store's generation.
func (s *store) Positions() (map[string]kvevents.Position, error) {
	if s.isClosed() {
		return nil, kvindex.ErrClosed
	}
	var out map[string]kvevents.Position
	err := s.run("Positions", func(g *generation) (bool, error) {
		ctx, cancel := s.ctx()
		defer cancel()
		res, err := s.posGet.Exec(ctx, s.client, s.keys, []string{s.prefix, g.token}).ToArray()
		if err := s.count(err); err != nil {
			return false, fmt.Errorf("redisstore: Positions: %w", err)
		}
		if len(res) == 0 {
			return true, nil
		}
		out = make(map[string]kvevents.Position, (len(res)-1)/2)
		for i := 1; i+1 < len(res); i += 2 {
			src, err1 := res[i].ToString()
			v, err2 := res[i+1].ToString()
			p, err3 := parsePosition(v)
			if err1 != nil || err2 != nil || err3 != nil {
				return false, fmt.Errorf("redisstore: Positions: source %.80q: bad position %.40q", src, v)
			}
			out[src] = p
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parsePosition reads "seq:digest" (unsigned decimals).
func parsePosition(v string) (kvevents.Position, error) {
	seq, digest, ok := strings.Cut(v, ":")
	a, err1 := strconv.ParseUint(seq, 10, 64)
	b, err2 := strconv.ParseUint(digest, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return kvevents.Position{}, fmt.Errorf("bad position %.40q", v)
	}
	return kvevents.Position{Seq: a, Digest: b}, nil
}
