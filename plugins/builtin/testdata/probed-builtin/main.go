// Command probed-builtin serves built-in probe kinds as a plugin, as
// `probed plugin serve KIND...` does, for the tests of package builtin.
package main

import (
	"fmt"
	"os"

	"github.com/probed/probed/plugins/builtin"
)

func main() {
	if err := builtin.Serve("test", os.Args[1:]...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
