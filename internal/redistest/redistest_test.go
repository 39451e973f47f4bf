package redistest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { Stop() })) }

func TestStartPingClose(t *testing.T) {
	s := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ping(ctx, s.Socket()); err != nil {
		t.Fatal(err)
	}
	if Require(t) != s {
		t.Fatal("Require started a second server")
	}
	if a, b := Prefix(t), Prefix(t); a == b {
		t.Fatalf("two prefixes equal: %q", a)
	}
	// A private server of its own dies with Close.
	s2, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if err := ping(ctx, s2.Socket()); err == nil {
		t.Fatal("server still answers after Close")
	}
}
