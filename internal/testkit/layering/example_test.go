package layering_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/internal/testkit/layering"
)

// A table of two layers, and a lower package that imports a higher one.
func Example() {
	tab := layering.Table{
		Module: "example.com/m", File: "table.go",
		Layers: []layering.Layer{
			{Name: "stack", Library: true, Packages: []string{"socket"}},
			{Name: "references", Library: true, Packages: []string{"coordinator"}},
		},
	}
	fmt.Println(tab.Check([]layering.Package{
		{ImportPath: "example.com/m/socket", Imports: []string{"example.com/m/coordinator"}},
		{ImportPath: "example.com/m/coordinator", Imports: []string{"example.com/m/socket"}},
	}))
	// Output:
	// [socket (stack) imports coordinator (references): imports only point to a package's own layer or below]
}
