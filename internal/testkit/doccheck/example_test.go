package doccheck_test

import (
	"fmt"
	"strings"

	"github.com/zmqguard/zmqguard/internal/testkit/doccheck"
)

// Every Markdown reference in this repository's Go comments and .md files
// outside docs/ resolves.
func Example() {
	missing, err := doccheck.Missing("../../..")
	if err != nil {
		panic(err)
	}
	n := 0
	for _, r := range missing {
		if !strings.HasPrefix(r.File, "docs/") {
			n++
		}
	}
	fmt.Println("dangling references outside docs/:", n)
	// Output: dangling references outside docs/: 0
}
