package msgpscan_test

import (
	"bytes"
	"encoding/hex"
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

func ExampleScan() {
	frames := []string{
		"920207",   // (2, 7): a front-end's wave request
		"a3e08080", // a str holding invalid UTF-8
		"818001",   // a map keyed by a map
		"ddffffffff",
		"45", // an int: well-formed msgpack (the typed decode refuses it)
	}
	for _, h := range frames {
		b, _ := hex.DecodeString(h)
		err := msgpscan.Scan(b, nil)
		fmt.Printf("%-10s %-8v %v\n", h, decodeguard.ReasonOf(err), err)
	}
	deep := append(bytes.Repeat([]byte{0x91}, 20000), 0x01)
	fmt.Println(msgpscan.Scan(deep, nil))
	// Output:
	// 920207     none     <nil>
	// a3e08080   decode   zmqguard: decode: str is not valid UTF-8 at offset 0
	// 818001     decode   zmqguard: decode: map key is a map or an array at offset 1
	// ddffffffff decode   zmqguard: decode: array length exceeds the bytes left at offset 0
	// 45         none     <nil>
	// zmqguard: oversize: nesting deeper than MaxDepth at offset 32
}

func ExampleScanOffset() {
	var dropped [len(decodeguard.Counts{})]int
	for _, b := range [][]byte{{0x92, 0x01}, {0xc1}, {0x01, 0x02}, {0x90}} {
		if _, err := msgpscan.ScanOffset(b, nil); err != nil {
			dropped[decodeguard.ReasonOf(err)]++ // no allocation on this path
		}
	}
	fmt.Println("decode drops:", dropped[decodeguard.ReasonDecode])
	// Output: decode drops: 3
}

func ExampleDecodeUntyped() {
	b, _ := hex.DecodeString("939292050392000107c3") // ([[5,3],[0,1]], 7, True)
	v, err := msgpscan.DecodeUntyped(b, nil)
	fmt.Println(v, err)
	_, err = msgpscan.DecodeUntyped(append(b, 0x00), nil)
	fmt.Println(err)
	// Output:
	// [[[5 3] [0 1]] 7 true] <nil>
	// zmqguard: decode: trailing bytes after the top-level object at offset 10
}
