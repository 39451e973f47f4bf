package apicheck_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/zmqguard/zmqguard/internal/testkit/apicheck"
)

// Surface lists a module's exported names with their signatures, package by
// package.
func Example() {
	root, err := os.MkdirTemp("", "apicheck")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/m\n"), 0o644)
	os.Mkdir(filepath.Join(root, "p"), 0o755)
	os.WriteFile(filepath.Join(root, "p", "p.go"), []byte("package p\n\ntype Conn struct{}\n\nfunc (*Conn) Close() error { return nil }\n\nfunc (*Conn) flush() {}\n"), 0o644)
	names, err := apicheck.Surface(root)
	if err != nil {
		panic(err)
	}
	for _, n := range names {
		fmt.Println(n)
	}
	// Output:
	// p method Conn.Close func(*Conn) error
	// p type Conn struct{}
}
