package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
	"golang.org/x/crypto/curve25519"
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
	derived, err3 := curve25519.X25519(sec[:], curve25519.Basepoint)
	if err1 != nil || err2 != nil || err3 != nil || zmtpguard.CurveKey(derived) != pub {
		t.Fatalf("keys do not pair: %v %v %v", err1, err2, err3)
	}

	dir := t.TempDir()
	out.Reset()
	if code := run(ctx, []string{"keygen", "--out", dir, "--name", "srv"}, &out, &errb, false); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	cPublic, cSecret, err := zmtpguard.LoadCertificate(filepath.Join(dir, "srv.key_secret"))
	if err != nil || cSecret == (zmtpguard.CurveKey{}) || !strings.Contains(out.String(), cPublic.String()) {
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

// TestSinkCurve: the sink with --curve-secret-key-file and --curve-allow
// takes messages from a listed CURVE client only.
func TestSinkCurve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	srvDir, cliDir := t.TempDir(), t.TempDir()
	_, srvSecret, srvPub, err := zmtpguard.CreateCertificates(srvDir, "server")
	if err != nil {
		t.Fatal(err)
	}
	_, cliSecretPath, _, err := zmtpguard.CreateCertificates(cliDir, "client")
	if err != nil {
		t.Fatal(err)
	}
	_, cliSecret, err := zmtpguard.LoadCertificate(cliSecretPath)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runBin(t, 20*time.Second, "sink", "--bind", "tcp://127.0.0.1:0", "--curve-secret-key-file", srvSecret); code != 2 {
		t.Fatalf("--curve-secret-key-file without --curve-allow: exit %d, want 2", code)
	}
	p := start(t, ctx, "sink", "--bind", "tcp://127.0.0.1:0", "--count", "3", "--log-format", "json",
		"--curve-secret-key-file", srvSecret, "--curve-allow", cliDir)
	ep := p.logField("sink receiving", "endpoint", 20*time.Second)

	// An unlisted key knows the server but is refused (it keeps retrying
	// meanwhile; PUSH never connects, so nothing of it can be counted).
	_, strangerSec, _ := zmtpguard.GenerateCurveKeyPair()
	so := quietSocket()
	so.Guard.Curve = &zmtpguard.CurveConfig{SecretKey: strangerSec, ServerKey: srvPub}
	stranger, err := socket.New("PUSH", so)
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	stranger.Dial(ep)

	o := quietSocket()
	o.Guard.Curve = &zmtpguard.CurveConfig{SecretKey: cliSecret, ServerKey: srvPub}
	push, err := socket.New("PUSH", o)
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.Dial(ep)
	for i := 0; i < 3; i++ {
		if err := push.Send(ctx, []byte("sealed")); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("sink exit %d\nstdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	if r := p.jsonLine(); num(r, "messages") != 3 {
		t.Fatalf("sink report: %s", p.stdout)
	}
	if !strings.Contains(p.stderr.String(), "CURVE on") {
		t.Errorf("no CURVE start-up line:\n%s", p.stderr)
	}
}

// TestScanReportsCurve: scan says when a port demands CURVE.
func TestScanReportsCurve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	dir := t.TempDir()
	_, secret, _, err := zmtpguard.CreateCertificates(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, ctx, "sink", "--bind", "tcp://127.0.0.1:0", "--log-format", "json",
		"--curve-secret-key-file", secret, "--curve-allow", dir)
	ep := p.logField("sink receiving", "endpoint", 20*time.Second)
	code, out, _ := runBin(t, 20*time.Second, "scan", ep, "--timeout", "2s")
	if code == 0 || !strings.Contains(out, "demands CURVE") {
		t.Fatalf("scan of a CURVE port: exit %d\n%s", code, out)
	}
}
