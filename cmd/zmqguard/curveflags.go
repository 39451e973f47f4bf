package main

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// curveServerFlags are a serving command's CURVE flags.
type curveServerFlags struct {
	secretFile *string
	allow      *string
}

func addCurveServerFlags(fs *flag.FlagSet) *curveServerFlags {
	return &curveServerFlags{
		secretFile: fs.String("curve-secret-key-file", "", "serve CURVE only, with the server key pair of this `file` (a NAME.key_secret certificate, as pyzmq's zmq.auth or 'zmqguard keygen --out' write it); needs --curve-allow"),
		allow:      fs.String("curve-allow", "", "CURVE clients admitted: a `path` to a directory of public certificates (NAME.key) or one certificate file; re-read on SIGHUP"),
	}
}

// config returns the CURVE server config the flags ask for (nil when
// neither is given) and a stop function ending the SIGHUP reloads.
func (f *curveServerFlags) config(ctx context.Context, logger *slog.Logger) (*zmtpguard.CurveConfig, func(), error) {
	noop := func() {}
	if *f.secretFile == "" && *f.allow == "" {
		return nil, noop, nil
	}
	if *f.secretFile == "" || *f.allow == "" {
		return nil, noop, usagef("--curve-secret-key-file and --curve-allow go together")
	}
	certPublic, certSecret, err := zmtpguard.LoadCertificate(*f.secretFile)
	if err != nil {
		return nil, noop, fileFlagError("--curve-secret-key-file", *f.secretFile, err)
	}
	if certSecret == (zmtpguard.CurveKey{}) {
		return nil, noop, usagef("--curve-secret-key-file %s holds no secret key (give the .key_secret file)", *f.secretFile)
	}
	ks := &zmtpguard.KeySet{Path: *f.allow}
	n, err := ks.Reload()
	if err != nil {
		return nil, noop, fileFlagError("--curve-allow", *f.allow, err)
	}
	logger.Info("CURVE on: only listed client keys are admitted", "public_key", certPublic.String(), "allowed_keys", n, "allow", *f.allow)
	rctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-rctx.Done():
				return
			case <-hup:
				if n, err := ks.Reload(); err != nil {
					logger.Error("CURVE allowlist reload failed; the previous set stays in force", "allow", *f.allow, "err", err)
				} else {
					logger.Info("CURVE allowlist reloaded", "allow", *f.allow, "allowed_keys", n)
				}
			}
		}
	}()
	stop := func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
	return &zmtpguard.CurveConfig{Server: true, SecretKey: certSecret, Authorize: ks.Authorize, Logger: logger}, stop, nil
}

// fileFlagError is the one-line refusal of a file a flag names: the flag,
// the path (quoted) and what is wrong, without the path a second time
// ("--curve-allow \"/x\": no such file or directory", not "open /x: no
// such file or directory").
func fileFlagError(flagName, path string, err error) error {
	var pe *fs.PathError
	detail := err.Error()
	if errors.As(err, &pe) && pe.Path == path {
		detail = pe.Err.Error()
	} else if rest, ok := strings.CutPrefix(detail, path+": "); ok {
		detail = rest
	}
	return usagef("%s %q: %s", flagName, path, detail)
}

// curveClientFlags are a client command's CURVE flags.
type curveClientFlags struct {
	serverKey  *string
	secretFile *string
}

func addCurveClientFlags(fs *flag.FlagSet) *curveClientFlags {
	return &curveClientFlags{
		serverKey: fs.String("curve-server-key", "", "speak CURVE to a server whose public key is this `Z85` text (40 characters, the server certificate's public-key)"),
		secretFile: fs.String("curve-secret-key-file", "", "the client's own key pair, from this `file` (a NAME.key_secret certificate, as pyzmq's zmq.auth or 'zmqguard keygen --out' write it); "+
			"without it a fresh key pair is made, which only a server admitting any key lets in; needs --curve-server-key"),
	}
}

// config returns the CURVE client config the flags ask for (nil when
// neither is given).
func (f *curveClientFlags) config(logger *slog.Logger) (*zmtpguard.CurveConfig, error) {
	if *f.serverKey == "" && *f.secretFile == "" {
		return nil, nil
	}
	if *f.serverKey == "" {
		return nil, usagef("--curve-secret-key-file needs --curve-server-key (the server's public key)")
	}
	server, err := zmtpguard.ParseCurveKey(*f.serverKey)
	if err != nil {
		return nil, usagef("--curve-server-key %s: %v", ratelog.Escape(*f.serverKey, 64), err)
	}
	var secret zmtpguard.CurveKey
	if *f.secretFile != "" {
		certPublic, certSecret, err := zmtpguard.LoadCertificate(*f.secretFile)
		if err != nil {
			return nil, fileFlagError("--curve-secret-key-file", *f.secretFile, err)
		}
		if certSecret == (zmtpguard.CurveKey{}) {
			return nil, usagef("--curve-secret-key-file %s holds no secret key (give the .key_secret file)", *f.secretFile)
		}
		secret = certSecret
		logger.Info("CURVE client", "server_key", server.String(), "public_key", certPublic.String(), "key_file", *f.secretFile)
	} else {
		pub, sec, err := zmtpguard.GenerateCurveKeyPair()
		if err != nil {
			return nil, err
		}
		secret = sec
		logger.Info("CURVE client with a fresh key pair (only a server admitting any key lets it in; give --curve-secret-key-file otherwise)",
			"server_key", server.String(), "public_key", pub.String())
	}
	return &zmtpguard.CurveConfig{SecretKey: secret, ServerKey: server, Logger: logger}, nil
}
