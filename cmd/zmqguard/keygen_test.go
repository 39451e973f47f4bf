package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

func TestKeygen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"keygen"}, &out, &errb, false); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Fields(out.String())
	if len(lines) != 2 {
		t.Fatalf("output %q", out.String())
	}
	pub, err1 := zmtpguard.ParseCurveKey(lines[0])
	sec, err2 := zmtpguard.ParseCurveKey(lines[1])
	derived, err3 := zmtpguard.CurvePublicKey(sec)
	if err1 != nil || err2 != nil || err3 != nil || derived != pub {
		t.Fatalf("keys do not pair: %v %v %v", err1, err2, err3)
	}

	dir := t.TempDir()
	out.Reset()
	if code := run(ctx, []string{"keygen", "--out", dir, "--name", "srv"}, &out, &errb, false); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	c, err := zmtpguard.LoadCertificate(filepath.Join(dir, "srv.key_secret"))
	if err != nil || !c.HasSecret() || !strings.Contains(out.String(), c.Public.String()) {
		t.Fatalf("certificate: %v, output %q", err, out.String())
	}
	errb.Reset()
	if code := run(ctx, []string{"keygen", "--out", dir, "--name", "srv"}, &out, &errb, false); code == 0 {
		t.Fatal("keygen overwrote existing certificates")
	}
	if code := run(ctx, []string{"keygen", "extra"}, &out, &errb, false); code != 2 {
		t.Fatalf("keygen with an argument: exit %d", code)
	}
}
