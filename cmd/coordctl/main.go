package main

import (
	"fmt"
	"io"
	"os"

	"github.com/coordinator-dev/coordinator/internal/app"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs one coordctl command line and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	a := &cli{stdout: stdout, stderr: stderr}
	fs := a.flagSet("coordctl")
	pos, rest, err := parseArgs(fs, args)
	if err != nil {
		return a.usageError(err)
	}
	if a.version {
		a.printf("%s", app.BuildVersion().Text("coordctl"))
		return app.ExitOK
	}
	if len(pos) == 0 {
		fs.Usage()
		return app.ExitUsage
	}
	cmd, ok := commands[pos[0]]
	if !ok {
		return a.usageError(fmt.Errorf("unknown command %q", pos[0]))
	}
	if err := a.check(); err != nil {
		return a.usageError(err)
	}
	if a.session != "" && pos[0] != "lock" {
		return a.usageError(fmt.Errorf("-session: only lock attaches to a session (%s does not)", pos[0]))
	}
	if rest != nil && !cmd.takesCommand {
		return a.usageError(fmt.Errorf("%s does not run a command after --", pos[0]))
	}
	if len(pos)-1 < cmd.minArgs || len(pos)-1 > cmd.maxArgs {
		return a.usageError(fmt.Errorf("usage: coordctl [flags] %s %s", pos[0], cmd.usage))
	}
	return cmd.run(a, pos[1:], rest)
}
