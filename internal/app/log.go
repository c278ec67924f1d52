package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// LogConfig is the log setting every binary has.
type LogConfig struct {
	Level  slog.Level
	Format string

	level string
}

// StringFlags defines string flags backed by environment variables, as an
// *envflag.Set does. LogConfig.Flags takes one, so that this package stays a
// leaf that imports nothing of the module.
type StringFlags interface {
	String(p *string, name, env, def, text string)
}

// Flags defines -log-level and -log-format, with variables named
// envPrefix+"_LOG_LEVEL" and envPrefix+"_LOG_FORMAT".
func (c *LogConfig) Flags(v StringFlags, envPrefix string) {
	v.String(&c.level, "log-level", envPrefix+"_LOG_LEVEL", "info", "debug, info, warn or error")
	v.String(&c.Format, "log-format", envPrefix+"_LOG_FORMAT", "text", "text or json")
}

// Check validates the parsed flags and fills Level.
func (c *LogConfig) Check() error {
	if c.level != "" {
		if err := c.Level.UnmarshalText([]byte(c.level)); err != nil {
			return fmt.Errorf("log-level: %w", err)
		}
	}
	if c.Format != "text" && c.Format != "json" {
		return fmt.Errorf("log-format: %q is neither text nor json", c.Format)
	}
	return nil
}

// Logger returns the logger c describes, writing to w. It also routes
// go-redis's own messages through it, so that one process writes one log
// format.
func (c LogConfig) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Level}
	var log *slog.Logger
	if c.Format == "json" {
		log = slog.New(slog.NewJSONHandler(w, opts))
	} else {
		log = slog.New(slog.NewTextHandler(w, opts))
	}
	redis.SetLogger(redisLogger{log.With("component", "go-redis")})
	return log
}

// redisLogger adapts slog to go-redis's logging interface. go-redis logs
// only trouble (failed reconnects, discarded connections), so warn it is.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...))
}
