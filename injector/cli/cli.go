// Package cli holds tether-injector's subcommands besides serving the
// webhook: inject (the webhook's mutation of a manifest, offline) and
// check (what is wrong with an install). main.go hands them its
// arguments; each returns its exit code.
package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is a subcommand: it parses args (after its name) and returns
// the process's exit code.
type command func(args []string, stdin io.Reader, stdout, stderr io.Writer) int

var commands = map[string]command{
	"inject": runInject,
	"check":  runCheck,
}

// Main runs the subcommand args[0] names. ok is false when args name
// none: the caller serves the webhook (its flags all start with "-").
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return 0, false
	}
	cmd, found := commands[args[0]]
	if !found {
		fmt.Fprintf(stderr, "tether-injector: unknown command %q (commands: inject, check; without one it serves the webhook, see -h)\n", args[0])
		return 2, true
	}
	return cmd(args[1:], stdin, stdout, stderr), true
}

// WebhookUsage is the usage of tether-injector without a command (it
// serves the webhook): the commands, then fs's flags.
func WebhookUsage(fs *flag.FlagSet) func() {
	return func() {
		w := fs.Output()
		fmt.Fprint(w, `Usage:
  tether-injector [flags]              serve the webhook (the chart's Deployment runs this)
  tether-injector inject -f FILE ...   print a manifest with the sidecar injected, offline (inject -h)
  tether-injector check ...            say what is wrong with an install (check -h)

Flags of the webhook:
`)
		fs.PrintDefaults()
	}
}

// exit codes
const (
	exitOK       = 0
	exitProblems = 1 // a denial, a failed check, unreadable input
	exitUsage    = 2
)
