package zmtpwire

import "testing"

// TestParsers checks the wire parsers on a valid READY and on bad input.
func TestParsers(t *testing.T) {
	g := LocalGreeting()
	if err := CheckGreeting(g[:], false); err != nil {
		t.Fatalf("own greeting refused: %v", err)
	}
	if err := CheckGreeting([]byte("GET / HTTP/1.1"), false); err == nil {
		t.Fatal("HTTP accepted as a greeting")
	}
	if h, ok, err := ParseFrameHeader([]byte{FlagCommand, 5}, 10); !ok || err != nil || h.Size != 5 {
		t.Fatalf("short header: %d %v %v", h.Size, ok, err)
	}
	if _, _, err := ParseFrameHeader([]byte{FlagLong, 0, 0, 0, 1, 0, 0, 0, 0}, 1<<20); err == nil {
		t.Fatal("a 2^32-byte frame passed a 1 MiB limit")
	}
	props := append([]byte{11}, "Socket-Type"...)
	props = append(props, 0, 0, 0, 4)
	props = append(props, "PUSH"...)
	cmd := append([]byte{5}, CmdReady...)
	name, data, err := ParseCommand(append(cmd, props...))
	if err != nil || string(name) != CmdReady {
		t.Fatalf("ParseCommand: %q %v", name, err)
	}
	if r, err := ParseReady(data, "", DefaultMaxProperties, DefaultMaxPropertySize); err != nil || r.SocketType != "PUSH" {
		t.Fatalf("ReadyType: %q %v", r.SocketType, err)
	}
	if _, err := ParseReady(data[:len(data)-1], "", DefaultMaxProperties, DefaultMaxPropertySize); err == nil {
		t.Fatal("a truncated READY passed")
	}
}
