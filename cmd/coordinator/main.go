// Command coordinator serves lock and election leases over gRPC.
//
// Every flag has an environment variable (see -help); a flag wins. With no
// configuration it serves on 127.0.0.1:7400 from the embedded memory store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/coordinator-dev/coordinator/internal/logging"
	"github.com/coordinator-dev/coordinator/server"
)

func main() {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	cfg, err := server.ParseConfig(fs, os.Args[1:], os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "coordinator: %v\n", err)
		os.Exit(2)
	}
	log := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, cfg, log); err != nil {
		log.Error("coordinator failed", "err", err)
		os.Exit(1)
	}
}
