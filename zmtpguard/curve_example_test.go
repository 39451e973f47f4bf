package zmtpguard_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// A CURVE PULL listener that admits one client key, and that client.
func ExampleCurveConfig() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serverPub, serverSec, _ := zmtpguard.GenerateCurveKeyPair()
	clientPub, clientSec, _ := zmtpguard.GenerateCurveKeyPair()

	// Admit one key (a KeySet{Path: "certs/"}, once reloaded, admits a
	// directory of public certificates).
	admit := func(key zmtpguard.CurveKey, _ net.Addr) (bool, string) { return key == clientPub, "" }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := zmtpguard.NewListener(ln, "PULL", &zmtpguard.Config{
		Curve: &zmtpguard.CurveConfig{Server: true, SecretKey: serverSec, Authorize: admit},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	go func() {
		c, err := zmtpguard.Dial(ctx, "tcp", ln.Addr().String(), "PUSH", nil, &zmtpguard.Config{
			Curve: &zmtpguard.CurveConfig{SecretKey: clientSec, ServerKey: serverPub},
		})
		if err != nil {
			return
		}
		defer c.Close()
		c.WriteMessage([]byte("sealed"))
		c.Flush()
		var m zmtpguard.Message
		c.ReadMessage(&m) // until the server closes
	}()

	c, err := l.Accept(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	var m zmtpguard.Message
	if err := c.ReadMessage(&m); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s from the listed key: %v\n", m.Frames[0], c.Peer().CurveKey == clientPub)
	// Output: sealed from the listed key: true
}
