//go:build tools

package vllmwire

// The msgp code generator is run by go:generate (go run
// github.com/tinylib/msgp); importing it here, behind a build tag that is
// never set, keeps its dependencies in go.mod and go.sum through
// `go mod tidy`.
import _ "github.com/tinylib/msgp"
