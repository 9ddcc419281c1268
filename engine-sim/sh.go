package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// runShell is the image's /bin/sh (the same binary, called as sh): a POSIX
// shell interpreter (mvdan.cc/sh), so a sim lane runs pre_exec and
// post_exec as an engine image with a shell does. Only `sh -c SCRIPT
// [NAME [ARG...]]` is supported, which is how sparklane calls it.
func runShell(args []string) int {
	if len(args) < 2 || args[0] != "-c" {
		fmt.Fprintln(os.Stderr, "sh (engine-sim): only sh -c SCRIPT [NAME [ARG...]] is supported")
		return 2
	}
	prog, err := syntax.NewParser().Parse(strings.NewReader(args[1]), "sh -c")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sh:", err)
		return 2
	}
	params := args[2:]
	if len(params) > 0 {
		params = params[1:] // $0
	}
	r, err := interp.New(interp.StdIO(os.Stdin, os.Stdout, os.Stderr), interp.Params(append([]string{"--"}, params...)...))
	if err != nil {
		fmt.Fprintln(os.Stderr, "sh:", err)
		return 2
	}
	err = r.Run(context.Background(), prog)
	var status interp.ExitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return int(status)
	default:
		fmt.Fprintln(os.Stderr, "sh:", err)
		return 1
	}
}
