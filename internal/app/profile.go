package app

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
)

// StartCPUProfile profiles the process's CPU into file until the returned
// stop is called, which writes the profile: for a diagnosis of where a
// process spends its time (go tool pprof BINARY FILE). An empty file profiles
// nothing.
func StartCPUProfile(file string, log *slog.Logger) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file) //nolint:gosec // G304: the operator names the file to write
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	log.Info("profiling CPU until shutdown", "file", file)
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Warn("could not write the CPU profile", "file", file, "err", err)
			return
		}
		log.Info("CPU profile written", "file", file)
	}, nil
}
