package zmtpguard

import (
	"errors"
	"sync"
)

// KeySet is a reloadable set of admitted CURVE client keys: its Authorize
// method, as [CurveConfig].Authorize, admits exactly the listed keys. Load it
// from a directory of public certificates (NAME.key, as pyzmq's
// zmq.auth.create_certificates writes them and configure_curve(location=…)
// reads them) or from one certificate file. A KeySet is safe for
// concurrent use; Reload swaps the whole set at once.
type KeySet struct {
	mu   sync.RWMutex
	path string
	keys map[CurveKey]string
}

// LoadKeySet reads the public keys at path (a directory of NAME.key
// certificates or one certificate file) into a new KeySet.
func LoadKeySet(path string) (*KeySet, error) {
	ks := &KeySet{path: path}
	if err := ks.Reload(); err != nil {
		return nil, err
	}
	return ks, nil
}

// Reload re-reads the KeySet's path and replaces the set. On error the old
// set stays in force.
func (ks *KeySet) Reload() error {
	if ks.path == "" {
		return errors.New("zmtpguard: KeySet has no path to reload")
	}
	keys, err := loadPublicKeys(ks.path)
	if err != nil {
		return err
	}
	ks.mu.Lock()
	ks.keys = keys
	ks.mu.Unlock()
	return nil
}

// Len returns the number of admitted keys.
func (ks *KeySet) Len() int {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return len(ks.keys)
}

// Contains reports whether k is admitted.
func (ks *KeySet) contains(k CurveKey) bool {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	_, ok := ks.keys[k]
	return ok
}

// Authorize, as [CurveConfig].Authorize, admits the keys in the set. It assigns
// no user id.
func (ks *KeySet) Authorize(req AuthRequest) (bool, string) {
	return ks.contains(req.Key), ""
}
