package zmtpguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

// Test keys from libzmq's zmq_curve(7) manual page ("TEST KEY VALUES").
const (
	manServerPublic = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
	manServerSecret = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
	manClientPublic = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
	manClientSecret = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"
)

func TestZ85(t *testing.T) {
	// RFC 32's test vector.
	in := []byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}
	s, err := z85Encode(in)
	if err != nil || s != "HelloWorld" {
		t.Fatalf("Z85Encode = %q, %v; want HelloWorld", s, err)
	}
	b, err := z85Decode("HelloWorld")
	if err != nil || !bytes.Equal(b, in) {
		t.Fatalf("Z85Decode = %x, %v", b, err)
	}
	for i := 0; i < 100; i++ {
		var k CurveKey
		rand.Read(k[:])
		got, err := ParseCurveKey(k.String())
		if err != nil || got != k {
			t.Fatalf("round trip of %x: %x, %v", k, got, err)
		}
	}
	for _, bad := range []string{"Hell", "Hello Worl", "HelloWorl\"", "%nSc1"} {
		if _, err := z85Decode(bad); err == nil {
			t.Errorf("Z85Decode(%q) succeeded", bad)
		}
	}
	if _, err := z85Decode("%nSc0"); err != nil { // 0xFFFFFFFF, the largest group
		t.Errorf("Z85Decode of the largest group: %v", err)
	}
	if _, err := z85Encode([]byte{1, 2, 3}); err == nil {
		t.Error("Z85Encode of 3 bytes succeeded")
	}
	if _, err := ParseCurveKey("short"); err == nil || !strings.Contains(err.Error(), "5 characters") {
		t.Errorf("ParseCurveKey(short): %v", err)
	}
}

func TestCurveManPageKeys(t *testing.T) {
	for _, kp := range [][2]string{{manServerPublic, manServerSecret}, {manClientPublic, manClientSecret}} {
		sec, err := ParseCurveKey(kp[1])
		if err != nil {
			t.Fatal(err)
		}
		pub, err := curvePublicKey(sec)
		if err != nil || pub.String() != kp[0] {
			t.Errorf("public key of %s = %s, %v; want %s", kp[1], pub, err, kp[0])
		}
	}
}

func TestCertificates(t *testing.T) {
	dir := t.TempDir()
	pubPath, secPath, pub, err := CreateCertificates(dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := CreateCertificates(dir, "node"); err == nil {
		t.Error("CreateCertificates overwrote existing files")
	}
	if _, _, _, err := CreateCertificates(dir, "../x"); err == nil {
		t.Error("CreateCertificates accepted a path as name")
	}
	if st, err := os.Stat(secPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("secret certificate mode: %v %v", st.Mode(), err)
	}
	pc, err := loadCertificate(pubPath)
	if err != nil || pc.Public != pub || !pc.Secret.isZero() {
		t.Fatalf("public certificate: %+v %v", pc, err)
	}
	sc, err := loadCertificate(secPath)
	if err != nil || sc.Public != pub || sc.Secret.isZero() {
		t.Fatalf("secret certificate: %v", err)
	}
	keys, err := loadPublicKeys(dir)
	if err != nil || len(keys) != 1 || keys[pub] != "node.key" {
		t.Fatalf("loadPublicKeys(dir) = %v, %v (the .key_secret must not count)", keys, err)
	}
	for name, text := range map[string]string{
		"no key":        "curve\n",
		"bad indent":    "curve\n  public-key = \"" + pub.String() + "\"\n",
		"bad key":       "curve\n    public-key = \"abc\"\n",
		"mismatch":      "curve\n    public-key = \"" + manServerPublic + "\"\n    secret-key = \"" + manClientSecret + "\"\n",
		"deep":          "curve\n        public-key = \"" + pub.String() + "\"\n",
		"binary name":   "cur\x00ve\n",
		"oversize file": strings.Repeat("#", maxCertificateSize+1),
	} {
		if _, err := readCertificate(strings.NewReader(text)); err == nil {
			t.Errorf("%s: readCertificate succeeded", name)
		}
	}
	// czmq style: metadata, bare values.
	c, err := readCertificate(strings.NewReader("metadata\n    name = \"n1\"\ncurve\n    public-key = " + manServerPublic + "\n    secret-key = '" + manServerSecret + "'\n"))
	if err != nil || c.Metadata["name"] != "n1" || c.Public.String() != manServerPublic {
		t.Fatalf("czmq-style certificate: %+v %v", c, err)
	}
	ks := &KeySet{Path: dir}
	n, err := ks.Reload()
	if err != nil || !ks.contains(pub) || n != 1 {
		t.Fatal("KeySet.Reload", n, err)
	}
	_, _, pub2, err := CreateCertificates(dir, "second")
	if err != nil {
		t.Fatal(err)
	}
	if ks.contains(pub2) {
		t.Fatal("key present before Reload")
	}
	if _, err := ks.Reload(); err != nil || !ks.contains(pub2) {
		t.Fatal("Reload did not pick up the new certificate", err)
	}
	os.WriteFile(filepath.Join(dir, "broken.key"), []byte("junk"), 0o644)
	if _, err := ks.Reload(); err == nil || !ks.contains(pub2) {
		t.Fatal("a failed Reload must keep the old set", err)
	}
}

// TestCertificatesPyzmq: certificates cross between pyzmq's zmq.auth and
// this package in both directions.
func TestCertificatesPyzmq(t *testing.T) {
	py := pypeer.Require(t, "zmq")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	_, _, ours, err := CreateCertificates(dir, "ours")
	if err != nil {
		t.Fatal(err)
	}
	script := `import sys, zmq.auth
d = sys.argv[1]
pub, sec = zmq.auth.load_certificate(d + "/ours.key_secret")
pub2, _ = zmq.auth.load_certificate(d + "/ours.key")
assert pub == pub2 and zmq.curve_public(sec) == pub
zmq.auth.create_certificates(d, "theirs")
print(pub.decode())
`
	out, err := exec.CommandContext(ctx, py, "-c", script, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != ours.String() {
		t.Fatalf("pyzmq read key %q, want %s", out, ours)
	}
	theirs, err := loadCertificate(filepath.Join(dir, "theirs.key_secret"))
	if err != nil || theirs.Secret.isZero() {
		t.Fatalf("pyzmq secret certificate: %v", err)
	}
	keys, err := loadPublicKeys(dir)
	if err != nil || len(keys) != 2 {
		t.Fatalf("loadPublicKeys: %v %v", keys, err)
	}
}
