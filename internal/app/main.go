package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses of the binaries.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// ParseError turns a configuration error into an exit status, writing it to
// stderr: -help is a success, anything else a usage error.
func ParseError(stderr io.Writer, program string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	fmt.Fprintf(stderr, "%s: %v\n", program, err)
	return ExitUsage
}

// SignalContext returns a context that ends at the first SIGINT or SIGTERM.
// After that first signal, a second one kills the process as usual, so a
// shutdown that hangs can still be interrupted.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore the default handling for the next signal
	}()
	return ctx, stop
}
