package redisstore

import (
	"fmt"

	"github.com/zmqguard/zmqguard/kvindex"
)

// retireScript releases, in generation ARGV[2], writer ARGV[4]'s lease of
// engine ARGV[3] (its own: key is deleted only if that writer holds it):
// the engine's Redis id, 0 when the engine is unknown, -1 when the
// generation is lost. The engine's ids and names stay (an id is never
// handed out again).
const retireScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return -1 end
local eid = redis.call('HGET', P .. 'eid', ARGV[3])
if not eid then return 0 end
local own = P .. 'own:' .. eid
if redis.call('GET', own) == ARGV[4] then redis.call('DEL', own) end
return tonumber(eid)
`

// RetireEngine is called by kvindex once a departed engine is cleared
// (kvevents.UpdateDeparted): with a writer lease, the store releases the
// engine's lease at once and stops renewing it, so that a departed engine
// holds no lease (and the renewal list does not grow with churn), and
// another writer may take the engine if it comes back there. Without
// WriterID it does nothing. It is a method of the store, not of the
// kvindex.Backend interface.
func (s *store) RetireEngine(engine string) error {
	if s.isClosed() {
		return kvindex.ErrClosed
	}
	if s.cfg.WriterID == "" {
		return nil
	}
	return s.run("RetireEngine", func(g *generation) (bool, error) {
		ctx, cancel := s.ctx()
		defer cancel()
		n, err := s.retire.Exec(ctx, s.client, nil, []string{s.prefix, g.token, engine, s.cfg.WriterID}).AsInt64()
		if err := s.count(err); err != nil {
			return false, fmt.Errorf("redisstore: RetireEngine %.80q: %w", engine, err)
		}
		if n < 0 {
			return true, nil
		}
		if n > 0 {
			s.mu.Lock()
			if s.gen == g {
				delete(s.leased, uint32(n))
			}
			s.mu.Unlock()
		}
		return false, nil
	})
}
