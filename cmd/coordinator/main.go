package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/internal/app"
)

func main() {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	cfg, err := coordinatord.ParseConfig(fs, os.Args[1:], os.LookupEnv)
	if err != nil {
		os.Exit(app.ParseError(os.Stderr, "coordinator", err))
	}
	if cfg.PrintVersion {
		fmt.Print(app.BuildVersion().Text("coordinator"))
		return
	}
	log := cfg.Log.Logger(os.Stderr)

	ctx, stop := app.SignalContext(context.Background())
	defer stop()
	if err := coordinatord.Run(ctx, cfg, log); err != nil {
		log.Error("coordinator failed", "err", err)
		stop()
		os.Exit(app.ExitFail)
	}
}
