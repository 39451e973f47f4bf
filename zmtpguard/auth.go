package zmtpguard

import (
	"errors"
	"net"
	"sync"
)

// KeySet is a reloadable set of admitted CURVE client keys: its Authorize
// method, as [CurveConfig].Authorize, admits exactly the listed keys. Set
// Path to a directory of public certificates (NAME.key, as pyzmq's
// zmq.auth.create_certificates writes them and configure_curve(location=…)
// reads them) or to one certificate file, and call Reload to read it:
//
//	ks := &zmtpguard.KeySet{Path: "certs/"}
//	n, err := ks.Reload() // and again on SIGHUP
//
// A KeySet with no keys loaded admits nobody. A KeySet is safe for
// concurrent use (Path must not change after the first Reload); Reload
// swaps the whole set at once.
type KeySet struct {
	// Path is the certificate directory or file Reload reads.
	Path string

	mu   sync.RWMutex
	keys map[CurveKey]string
}

// Reload reads Path and replaces the set with the public keys found, and
// returns how many are admitted now. On error the old set stays in force.
func (ks *KeySet) Reload() (int, error) {
	if ks.Path == "" {
		return 0, errors.New("zmtpguard: KeySet.Path is empty")
	}
	keys, err := loadPublicKeys(ks.Path)
	if err != nil {
		return 0, err
	}
	ks.mu.Lock()
	ks.keys = keys
	ks.mu.Unlock()
	return len(keys), nil
}

// contains reports whether k is admitted.
func (ks *KeySet) contains(k CurveKey) bool {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	_, ok := ks.keys[k]
	return ok
}

// Authorize, as [CurveConfig].Authorize, admits the keys in the set. It assigns
// no user id.
func (ks *KeySet) Authorize(key CurveKey, _ net.Addr) (bool, string) {
	return ks.contains(key), ""
}
