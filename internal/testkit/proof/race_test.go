//go:build race

package proof

func init() { raceEnabled = true }
