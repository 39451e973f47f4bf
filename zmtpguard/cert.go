package zmtpguard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// maxCertificateSize bounds a certificate file read by [LoadCertificate]:
// real ones are a few hundred bytes.
const maxCertificateSize = 64 << 10

// maxCertificates bounds how many certificates loadPublicKeys reads from
// one directory.
const maxCertificates = 65536

// certificate is a CURVE certificate in the ZPL text format czmq and pyzmq's
// zmq.auth write: a "curve" section with public-key (and, in a secret
// certificate, secret-key) in Z85, and an optional "metadata" section.
type certificate struct {
	// Public is the certificate's public key.
	Public CurveKey
	// Secret is the secret key; zero in a public certificate.
	Secret CurveKey
	// Metadata holds the metadata section's name = value pairs.
	Metadata map[string]string
}

// readCertificate parses a ZPL certificate from r (at most
// maxCertificateSize bytes). It reads what czmq's zcert and pyzmq's
// zmq.auth write: '#' comments, sections by 4-space indentation, values
// quoted or bare. A public-key is required; a secret-key, if present, must
// yield that public key.
func readCertificate(r io.Reader) (certificate, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxCertificateSize+1))
	if err != nil {
		return certificate{}, err
	}
	if len(data) > maxCertificateSize {
		return certificate{}, fmt.Errorf("zmtpguard: certificate is over %d bytes", maxCertificateSize)
	}
	var c certificate
	var havePub, haveSec bool
	var path []string // section names by depth
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxCertificateSize)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimRight(sc.Text(), " \t\r")
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(trimmed)
		if indent%4 != 0 || strings.HasPrefix(trimmed, "\t") {
			return certificate{}, fmt.Errorf("zmtpguard: certificate line %d: indentation is not a multiple of 4 spaces", lineNo)
		}
		depth := indent / 4
		if depth > len(path) {
			return certificate{}, fmt.Errorf("zmtpguard: certificate line %d: indented deeper than its section", lineNo)
		}
		path = path[:depth]
		name, value, isValue := strings.Cut(trimmed, "=")
		name = strings.TrimSpace(name)
		if !validZPLName(name) {
			return certificate{}, fmt.Errorf("zmtpguard: certificate line %d: name %s is not a ZPL name", lineNo, quoteText(name))
		}
		if !isValue {
			path = append(path, name)
			continue
		}
		value = strings.TrimSpace(value)
		if n := len(value); n >= 2 && (value[0] == '"' && value[n-1] == '"' || value[0] == '\'' && value[n-1] == '\'') {
			value = value[1 : n-1]
		}
		full := strings.Join(append(path, name), "/")
		switch full {
		case "curve/public-key":
			k, err := ParseCurveKey(value)
			if err != nil {
				return certificate{}, fmt.Errorf("zmtpguard: certificate line %d: public-key: %w", lineNo, err)
			}
			c.Public, havePub = k, true
		case "curve/secret-key":
			k, err := ParseCurveKey(value)
			if err != nil {
				return certificate{}, fmt.Errorf("zmtpguard: certificate line %d: secret-key: %w", lineNo, err)
			}
			c.Secret, haveSec = k, true
		default:
			if len(path) == 1 && path[0] == "metadata" {
				if c.Metadata == nil {
					c.Metadata = make(map[string]string)
				}
				c.Metadata[name] = value
			}
		}
	}
	if err := sc.Err(); err != nil {
		return certificate{}, err
	}
	if !havePub {
		return certificate{}, errors.New("zmtpguard: certificate has no curve/public-key")
	}
	if haveSec {
		pub, err := curvePublicKey(c.Secret)
		if err != nil {
			return certificate{}, err
		}
		if pub != c.Public {
			return certificate{}, errors.New("zmtpguard: certificate secret-key does not match its public-key")
		}
	}
	return c, nil
}

func validZPLName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !zmtpwire.NameChar(s[i]) && s[i] != '/' && s[i] != '*' && s[i] != '@' && s[i] != '$' {
			return false
		}
	}
	return true
}

// quoteText quotes s for an error message, escaped and capped.
func quoteText(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return fmt.Sprintf("%q", s)
}

// LoadCertificate reads the CURVE certificate file at path, in the ZPL text
// format czmq and pyzmq's zmq.auth write (a NAME.key public or a
// NAME.key_secret secret certificate), and returns its keys: secret is zero
// in a public certificate. A secret key, when present, must yield the
// public key.
func LoadCertificate(path string) (public, secret CurveKey, err error) {
	c, err := loadCertificate(path)
	return c.Public, c.Secret, err
}

// loadCertificate reads the certificate file at path.
func loadCertificate(path string) (certificate, error) {
	f, err := os.Open(path)
	if err != nil {
		return certificate{}, err
	}
	defer f.Close()
	c, err := readCertificate(f)
	if err != nil {
		return certificate{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// loadPublicKeys reads the public keys at path: every NAME.key certificate
// in a directory (as pyzmq's zmq.auth.load_certificates reads them; secret
// certificates are not read), or one certificate file. The map's values are
// the certificate file names.
func loadPublicKeys(path string) (map[CurveKey]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if st.IsDir() {
		files, err = filepath.Glob(filepath.Join(path, "*.key"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		if len(files) > maxCertificates {
			return nil, fmt.Errorf("zmtpguard: %s holds %d certificates, over %d", path, len(files), maxCertificates)
		}
	}
	keys := make(map[CurveKey]string, len(files))
	for _, f := range files {
		c, err := loadCertificate(f)
		if err != nil {
			return nil, err
		}
		keys[c.Public] = filepath.Base(f)
	}
	return keys, nil
}

// writeCertificate writes c in the ZPL format pyzmq and czmq read, with
// header as comment lines. A secret key is written only when c has one.
func writeCertificate(w io.Writer, c certificate, header string) error {
	var b strings.Builder
	for _, l := range strings.Split(header, "\n") {
		b.WriteString("#   " + l + "\n")
	}
	b.WriteString("\nmetadata\n")
	names := make([]string, 0, len(c.Metadata))
	for k := range c.Metadata {
		if !validZPLName(k) || strings.ContainsAny(c.Metadata[k], "\"\n\r") {
			return fmt.Errorf("zmtpguard: certificate metadata %s cannot be written in ZPL", quoteText(k))
		}
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b.WriteString("    " + k + " = \"" + c.Metadata[k] + "\"\n")
	}
	b.WriteString("curve\n    public-key = \"" + c.Public.String() + "\"\n")
	if !c.Secret.isZero() {
		b.WriteString("    secret-key = \"" + c.Secret.String() + "\"\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// CreateCertificates generates a key pair and writes it as dir/NAME.key
// (public, mode 0644) and dir/NAME.key_secret (both keys, mode 0600), the
// pair pyzmq's zmq.auth.create_certificates makes. Existing files are not
// overwritten. It returns the two paths and the public key.
func CreateCertificates(dir, name string) (publicPath, secretPath string, public CurveKey, err error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return "", "", public, fmt.Errorf("zmtpguard: certificate name %s is not a plain file name", quoteText(name))
	}
	pub, sec, err := GenerateCurveKeyPair()
	if err != nil {
		return "", "", public, err
	}
	publicPath = filepath.Join(dir, name+".key")
	secretPath = filepath.Join(dir, name+".key_secret")
	stamp := "****  Generated on " + time.Now().UTC().Format("2006-01-02 15:04:05") + " by zmqguard  ****"
	write := func(path string, mode os.FileMode, c certificate, header string) error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		if err := writeCertificate(f, c, header); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := write(publicPath, 0o644, certificate{Public: pub}, stamp+"\nZeroMQ CURVE Public certificate\n"+
		"Exchange securely, or use a secure mechanism to verify the contents\nof this file after exchange."); err != nil {
		return "", "", public, err
	}
	if err := write(secretPath, 0o600, certificate{Public: pub, Secret: sec}, stamp+"\nZeroMQ CURVE **Secret** certificate\n"+
		"DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions."); err != nil {
		os.Remove(publicPath)
		return "", "", public, err
	}
	return publicPath, secretPath, pub, nil
}
