package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

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
	cert, err := zmtpguard.LoadCertificate(*f.secretFile)
	if err != nil {
		return nil, noop, err
	}
	if !cert.HasSecret() {
		return nil, noop, usagef("--curve-secret-key-file %s holds no secret key (give the .key_secret file)", *f.secretFile)
	}
	ks, err := zmtpguard.LoadKeySet(*f.allow)
	if err != nil {
		return nil, noop, err
	}
	logger.Info("CURVE on: only listed client keys are admitted", "public_key", cert.Public.String(), "allowed_keys", ks.Len(), "allow", *f.allow)
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
				if err := ks.Reload(); err != nil {
					logger.Error("CURVE allowlist reload failed; the previous set stays in force", "allow", *f.allow, "err", err)
				} else {
					logger.Info("CURVE allowlist reloaded", "allow", *f.allow, "allowed_keys", ks.Len())
				}
			}
		}
	}()
	stop := func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
	return &zmtpguard.CurveConfig{Server: true, SecretKey: cert.Secret, Authorize: ks.Authorize, Logger: logger}, stop, nil
}
