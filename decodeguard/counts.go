package decodeguard

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// Counts counts drops (or refused connections) by reason, indexed by
// [Reason]. It is the one vocabulary every zmqguard component reports drops
// in, and what metrics adapters read. It marshals to JSON as an object of
// the non-zero counts keyed by reason name, such as {"decode":3,"oversize":1}.
type Counts [numReasons]uint64

// Total returns the sum of the counts.
func (c Counts) Total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

// Add adds o into c.
func (c *Counts) Add(o *Counts) {
	for r, v := range o {
		c[r] += v
	}
}

// MarshalJSON writes the non-zero counts as an object keyed by reason name.
func (c Counts) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for r, v := range c {
		if v == 0 {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, Reason(r).String()...)
		b = append(b, '"', ':')
		b = strconv.AppendUint(b, v, 10)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes; an unknown reason name is an
// error that names it.
func (c *Counts) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = Counts{}
	for k, v := range m {
		r, ok := parseReason(k)
		if !ok {
			return fmt.Errorf("decodeguard: unknown drop reason %q", ratelog.Escape(k, 64))
		}
		c[r] = v
	}
	return nil
}
