package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/internal/app"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "init-store" {
		os.Exit(initStore(args[1:]))
	}
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.Usage = usage(fs)
	cfg, err := coordinatord.ParseConfig(fs, args, os.LookupEnv)
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
	app.GovernProcs(ctx, log)
	if err := coordinatord.Run(ctx, cfg, log); err != nil {
		log.Error("coordinator failed", "err", err)
		stop()
		os.Exit(app.ExitFail)
	}
}

// initStore runs `coordinator init-store [flags]`: the same settings as the
// server's (only the store, the Redis URL, its key prefix and the store
// timeout matter), exit status 0 once the markers are written, 1 when the
// Redis is refused or cannot be reached, 2 for a usage error.
func initStore(args []string) int {
	fs := flag.NewFlagSet("coordinator init-store", flag.ContinueOnError)
	fs.Usage = usage(fs)
	cfg, err := coordinatord.ParseConfig(fs, args, os.LookupEnv)
	if err != nil {
		return app.ParseError(os.Stderr, "coordinator init-store", err)
	}
	if cfg.PrintVersion {
		fmt.Print(app.BuildVersion().Text("coordinator"))
		return app.ExitOK
	}
	if cfg.Store != coordinatord.StoreRedis {
		return app.ParseError(os.Stderr, "coordinator init-store",
			fmt.Errorf("it prepares a Redis store (-store=%s); the %s store needs nothing", coordinatord.StoreRedis, cfg.Store))
	}
	log := cfg.Log.Logger(os.Stderr)
	ctx, stop := app.SignalContext(context.Background())
	defer stop()
	if err := coordinatord.InitStore(ctx, cfg, log); err != nil {
		log.Error("init-store failed", "err", err)
		return app.ExitFail
	}
	return app.ExitOK
}

const usageText = `Usage: coordinator [flags]
       coordinator init-store [flags]

coordinator serves lock and election leases until SIGINT or SIGTERM.

coordinator init-store prepares a brand-new Redis, once, before the first
coordinator starts: it writes the data-loss markers, so that the first start
does not read their absence as data lost, and exits 0. It refuses, with exit
status 1, a Redis that has them or holds other keys of the prefix. Of the
flags, -store (redis), -redis-url, -redis-key-prefix and -store-timeout
matter to it.

Unless GOMAXPROCS is set, the coordinator sizes it to the CPU it uses, from
1 up to the CPUs it may use: a P it does not need costs it wake-ups of idle
threads at every call. Unless GOGC is set, it lets its heap grow by 64 MiB
between collections.

Flags:
`

// usage prints usageText, then the flags.
func usage(fs *flag.FlagSet) func() {
	return func() {
		_, _ = io.WriteString(fs.Output(), usageText)
		fs.PrintDefaults()
	}
}
