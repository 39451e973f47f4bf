package envelope_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
)

func Example() {
	// What a ROUTER receives from a REQ peer, and from a bare DEALER.
	fromREQ := [][]byte{[]byte("peer-A"), {}, []byte("get_meta_msg")}
	fromDEALER := [][]byte{[]byte("peer-B"), []byte("get_meta_msg")}

	env, err := envelope.Parse(fromREQ, nil)
	fmt.Printf("REQ: body=%q delimited=%v err=%v\n", env.Body, env.Delimited, err)
	reply := env.Reply(nil, []byte("metadata"))
	fmt.Printf("reply: %q\n", reply)

	_, err = envelope.Parse(fromDEALER, nil)
	fmt.Println("strict DEALER:", decodeguard.ReasonOf(err))
	fmt.Println(err)

	env, err = envelope.Parse(fromDEALER, &envelope.Options{Lenient: true})
	fmt.Printf("lenient DEALER: body=%q delimited=%v err=%v\n", env.Body, env.Delimited, err)
	fmt.Printf("reply: %q\n", env.Reply(nil, []byte("metadata")))

	fmt.Println(envelope.CheckFrames([][]byte{[]byte("a"), []byte("b")}, 1, 1))
	// Output:
	// REQ: body=["get_meta_msg"] delimited=true err=<nil>
	// reply: ["peer-A" "" "metadata"]
	// strict DEALER: envelope
	// zmqguard: envelope: no empty delimiter frame after the identity: second frame is non-empty (12 bytes, hex 6765745f6d657461...), the shape a bare DEALER sends; set Options.Lenient to accept it
	// lenient DEALER: body=["get_meta_msg"] delimited=false err=<nil>
	// reply: ["peer-B" "metadata"]
	// zmqguard: envelope: too many frames: got 2, want at most 1
}
