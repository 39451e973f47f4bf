package zmtpguard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"

	"golang.org/x/crypto/curve25519"
)

// z85Alphabet is the 85-character alphabet of Z85 (ZeroMQ RFC 32), in
// digit order.
const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// z85Digits maps a byte to its Z85 digit value plus one (0: not a Z85 digit).
var z85Digits = func() (d [256]byte) {
	for i := 0; i < len(z85Alphabet); i++ {
		d[z85Alphabet[i]] = byte(i + 1)
	}
	return d
}()

// z85Encode encodes b in Z85 (RFC 32): five characters per four bytes. The
// length of b must be a multiple of 4.
func z85Encode(b []byte) (string, error) {
	if len(b)%4 != 0 {
		return "", errors.New("zmtpguard: Z85 input length " + strconv.Itoa(len(b)) + " is not a multiple of 4")
	}
	out := make([]byte, 0, len(b)/4*5)
	for i := 0; i < len(b); i += 4 {
		v := uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
		var chunk [5]byte
		for j := 4; j >= 0; j-- {
			chunk[j] = z85Alphabet[v%85]
			v /= 85
		}
		out = append(out, chunk[:]...)
	}
	return string(out), nil
}

// z85Decode decodes the Z85 text s (RFC 32). The length of s must be a
// multiple of 5; a character outside the alphabet, or a group whose value
// exceeds 32 bits, is an error naming its offset.
func z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, errors.New("zmtpguard: Z85 text length " + strconv.Itoa(len(s)) + " is not a multiple of 5")
	}
	out := make([]byte, 0, len(s)/5*4)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for j := 0; j < 5; j++ {
			d := z85Digits[s[i+j]]
			if d == 0 {
				return nil, errors.New("zmtpguard: Z85 text has a character outside the alphabet at offset " + strconv.Itoa(i+j))
			}
			v = v*85 + uint64(d-1)
		}
		if v > 0xFFFFFFFF {
			return nil, errors.New("zmtpguard: Z85 group at offset " + strconv.Itoa(i) + " exceeds 32 bits")
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return out, nil
}

// CurveKey is a Curve25519 public or secret key, as CURVE uses them. Its
// text form is the 40-character Z85 encoding libzmq and pyzmq use.
type CurveKey [32]byte

// String returns k in Z85 (40 characters). For a secret key, the caller is
// responsible for where the text goes.
func (k CurveKey) String() string {
	s, _ := z85Encode(k[:]) // 32 bytes: a multiple of 4
	return s
}

// isZero reports whether k is all zero bytes (no key set).
func (k CurveKey) isZero() bool { return k == CurveKey{} }

// fingerprint returns a short, stable, non-reversible name for a public
// key: the first 8 bytes of its SHA-256, in hex. Logs name keys by it.
func (k CurveKey) fingerprint() string {
	h := sha256.Sum256(k[:])
	return hex.EncodeToString(h[:8])
}

// ParseCurveKey decodes a key from its 40-character Z85 text (as
// zmq_curve_keypair, pyzmq and certificates write it) or its 64-character
// hex text.
func ParseCurveKey(s string) (CurveKey, error) {
	var k CurveKey
	switch len(s) {
	case 40:
		b, err := z85Decode(s)
		if err != nil {
			return k, err
		}
		copy(k[:], b)
		return k, nil
	case 64:
		if _, err := hex.Decode(k[:], []byte(s)); err != nil {
			return CurveKey{}, errors.New("zmtpguard: CURVE key of 64 characters is not valid hex")
		}
		return k, nil
	}
	return k, errors.New("zmtpguard: CURVE key text is " + strconv.Itoa(len(s)) + " characters (want 40 Z85 or 64 hex)")
}

// curvePublicKey returns the public key of the secret key secret.
func curvePublicKey(secret CurveKey) (CurveKey, error) {
	var pub CurveKey
	p, err := curve25519.X25519(secret[:], curve25519.Basepoint)
	if err != nil {
		return pub, errors.New("zmtpguard: CURVE secret key yields no public key (low-order point)")
	}
	copy(pub[:], p)
	return pub, nil
}

// GenerateCurveKeyPair returns a new long-term key pair from crypto/rand.
func GenerateCurveKeyPair() (public, secret CurveKey, err error) {
	if _, err = rand.Read(secret[:]); err != nil {
		return public, secret, err
	}
	public, err = curvePublicKey(secret)
	return public, secret, err
}
