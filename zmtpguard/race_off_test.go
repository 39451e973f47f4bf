//go:build !race

package zmtpguard

const raceEnabled = false
