// Package cmdflags parses the flags of the binary's subcommands one way:
// a bad flag or a stray argument is reported on stderr with the command's
// name, never a silent exit 2, for the Packer plugin's commands and the
// mkosi generator's alike.
package cmdflags

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// Parse parses args into fs. On a bad flag it prints what was wrong and
// the command's usage (pflag's ContinueOnError prints nothing); arguments
// beyond the flags are refused unless allowArgs. It returns ok=false with
// the exit code when the command must stop: 0 after --help, 2 on misuse.
func Parse(fs *pflag.FlagSet, args []string, allowArgs bool, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0, false
		}
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		if fs.Usage != nil {
			fs.Usage()
		} else {
			fmt.Fprintf(stderr, "Usage of packer-plugin-podvm %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		fmt.Fprintf(stderr, "Run 'packer-plugin-podvm %s --help' for its flags.\n", fs.Name())
		return 2, false
	}
	if !allowArgs && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q: it takes flags only\nRun 'packer-plugin-podvm %s --help' for its flags.\n", fs.Name(), fs.Arg(0), fs.Name())
		return 2, false
	}
	return 0, true
}
