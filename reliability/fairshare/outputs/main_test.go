package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRow4: the row-4 attack in-process, with and without OnEngineDead:
// Run goes on, no forged output is delivered as engine 0's, engine 0 is
// not marked dead, no event is raised for a connection that holds no
// engine, and the honest engine is served in full afterwards.
func TestRow4(t *testing.T) {
	for _, cb := range []bool{false, true} {
		res, err := row4Once(cb)
		if err != nil {
			t.Fatal(err)
		}
		if res.RunEnded || res.ForgedDelivered != 0 || res.Engine0MarkedDead || res.DeadEvents != 0 || res.HonestAfterAttack != 100 {
			t.Errorf("OnEngineDead set %v: %+v", cb, res)
		}
	}
}
