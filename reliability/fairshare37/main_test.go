package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAttackAddr: the hostile addresses are distinct loopback hosts.
func TestAttackAddr(t *testing.T) {
	seen := map[string]bool{}
	for i := range 4200 {
		a := attackAddr(i)
		if seen[a] {
			t.Fatalf("address %s repeated at %d", a, i)
		}
		seen[a] = true
	}
	if attackAddr(0) != "127.1.0.1" || attackAddr(250) != "127.1.1.1" {
		t.Errorf("attackAddr(0) = %s, attackAddr(250) = %s", attackAddr(0), attackAddr(250))
	}
}
