//go:build race

package zmtpguard

// raceEnabled: the race detector changes allocation counts, so allocation
// assertions are skipped under it (the frames are still checked).
const raceEnabled = true
