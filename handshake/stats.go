package handshake

import (
	"encoding/json"
	"fmt"
)

// ServedCounts counts the requests answered with metadata, by [Variant]:
// index it with V1, V2 or V3 (index 0 is never counted); the total is
// c[V1]+c[V2]+c[V3]. It marshals to JSON as an object keyed by variant
// name, {"v1":0,"v2":0,"v3":0}, like decodeguard.Counts does for drop
// reasons, never as a positional list.
type ServedCounts [4]uint64

type servedJSON struct {
	V1 uint64 `json:"v1"`
	V2 uint64 `json:"v2"`
	V3 uint64 `json:"v3"`
}

// MarshalJSON implements json.Marshaler.
func (c ServedCounts) MarshalJSON() ([]byte, error) {
	return json.Marshal(servedJSON{V1: c[V1], V2: c[V2], V3: c[V3]})
}

// UnmarshalJSON implements json.Unmarshaler: it accepts what MarshalJSON
// writes; unknown keys are an error.
func (c *ServedCounts) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = ServedCounts{}
	for k, v := range m {
		switch k {
		case "v1":
			c[V1] = v
		case "v2":
			c[V2] = v
		case "v3":
			c[V3] = v
		default:
			return fmt.Errorf("handshake: served counts: unknown variant %q", k)
		}
	}
	return nil
}
