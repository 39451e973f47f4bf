package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

var keygenSpec = commandSpec{
	name:     "keygen",
	synopsis: "[--out DIR --name NAME]",
	summary:  "make a CURVE key pair (Z85) or a pair of ZPL certificate files",
	help: `Without --out, prints a new CURVE key pair in Z85 (40 characters each): the
public key on the first line, the secret key on the second.

With --out DIR, writes DIR/NAME.key (the public certificate, mode 0644) and
DIR/NAME.key_secret (both keys, mode 0600) in the ZPL format pyzmq's
zmq.auth.create_certificates writes and load_certificate reads, and prints the
two paths and the public key. Existing files are never overwritten.

A server takes the .key_secret file; its clients take its public key; a
directory of clients' .key files is a server's allowlist.`,
}

// keygenFlags are the flags of keygen.
type keygenFlags struct {
	out  string
	name string
}

// keygenCmd is the keygen command.
var keygenCmd = command[keygenFlags]{
	spec: keygenSpec,
	register: func(fs *flag.FlagSet, fl *keygenFlags) {
		fs.StringVar(&fl.out, "out", "", "directory to write NAME.key and NAME.key_secret into (default: print the keys)")
		fs.StringVar(&fl.name, "name", "zmqguard", "certificate base name, with --out")
	},
	run: runKeygen,
}

// runKeygen is the run function of keygen: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runKeygen(ctx context.Context, fl *keygenFlags, e *env) error {
	if fl.out == "" {
		pub, sec, err := zmtpguard.GenerateCurveKeyPair()
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, pub.String())
		fmt.Fprintln(e.stdout, sec.String())
		return nil
	}
	pubPath, secPath, pub, err := zmtpguard.CreateCertificates(fl.out, fl.name)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "public certificate: %s\nsecret certificate: %s\npublic key: %s\n", pubPath, secPath, pub)
	return nil
}
