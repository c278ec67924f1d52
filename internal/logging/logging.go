// Package logging builds the slog loggers of the binaries.
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// New returns a logger writing to w at level in format "text" or "json".
func New(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// CheckFormat reports a format New does not know.
func CheckFormat(format string) error {
	if format != "text" && format != "json" {
		return fmt.Errorf("log-format: %q is neither text nor json", format)
	}
	return nil
}
