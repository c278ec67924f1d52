// Command coordctl is the coordinator's command-line client: it takes locks
// and leaderships around commands, and shows and manages leases.
//
//	coordctl [flags] lock NAME [-- CMD ARGS…]
//	coordctl [flags] elect ELECTION VALUE [-- CMD ARGS…]
//	coordctl [flags] leader ELECTION
//	coordctl [flags] observe ELECTION
//	coordctl [flags] describe NAME
//	coordctl [flags] list [PREFIX]
//	coordctl [flags] release NAME HOLDER TOKEN
//
// Exit status: 0 success; 1 not acquired, lost, not found or failed; 2 bad
// usage; with CMD, CMD's own status when it ran to its end.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// run runs one coordctl command line and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	app := &app{stdout: stdout, stderr: stderr}
	fs := app.flagSet("coordctl")
	pos, rest, err := parseArgs(fs, args)
	if err != nil {
		return app.usageError(err)
	}
	if len(pos) == 0 {
		fs.Usage()
		return exitUsage
	}
	cmd, ok := commands[pos[0]]
	if !ok {
		return app.usageError(fmt.Errorf("unknown command %q", pos[0]))
	}
	if err := app.check(); err != nil {
		return app.usageError(err)
	}
	if rest != nil && !cmd.takesCommand {
		return app.usageError(fmt.Errorf("%s does not run a command after --", pos[0]))
	}
	if len(pos)-1 < cmd.minArgs || len(pos)-1 > cmd.maxArgs {
		return app.usageError(fmt.Errorf("usage: coordctl [flags] %s %s", pos[0], cmd.usage))
	}
	return cmd.run(app, pos[1:], rest)
}
