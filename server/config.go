package server

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Config is the coordinator's configuration. Every field has a flag and an
// environment variable; a flag given on the command line wins.
type Config struct {
	Listen             string
	MetricsListen      string
	Store              string
	RedisURL           string
	RedisKeyPrefix     string
	MaxTTL             time.Duration
	DataLossQuarantine time.Duration
	LockDelay          time.Duration
	ShutdownTimeout    time.Duration
	ObserveReconcile   time.Duration
	TLSCert            string
	TLSKey             string
	TLSClientCA        string
	AuthToken          string
	LogLevel           slog.Level
	LogFormat          string
}

// Store kinds.
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// configVar describes one setting: its flag, environment variable and default.
type configVar struct {
	flag, env, def, usage string
}

// ParseConfig reads the configuration from args (without the program name)
// and getenv. The usage text names the environment variable of every flag.
func ParseConfig(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	var c Config
	var quarantine, maxTTL, lockDelay, shutdown, reconcile, level string
	for _, v := range []struct {
		configVar
		dst *string
	}{
		{configVar{"listen", "COORDINATOR_LISTEN", "127.0.0.1:7400", "gRPC listen address"}, &c.Listen},
		{configVar{"metrics-listen", "COORDINATOR_METRICS_LISTEN", "127.0.0.1:7401", "Prometheus /metrics listen address (empty: off)"}, &c.MetricsListen},
		{configVar{"store", "COORDINATOR_STORE", StoreMemory, "lease store: memory or redis"}, &c.Store},
		{configVar{"redis-url", "COORDINATOR_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL (standalone, Sentinel or Cluster) for -store=redis"}, &c.RedisURL},
		{configVar{"redis-key-prefix", "COORDINATOR_REDIS_KEY_PREFIX", "coordinator", "prefix of every Redis key the coordinator writes"}, &c.RedisKeyPrefix},
		{configVar{"max-ttl", "COORDINATOR_MAX_TTL", "5m", "longest lease TTL a client may ask for"}, &maxTTL},
		{configVar{"data-loss-quarantine", "COORDINATOR_DATA_LOSS_QUARANTINE", "", "how long grants stop after the store lost its data (default: max-ttl; 0: off)"}, &quarantine},
		{configVar{"lock-delay", "COORDINATOR_LOCK_DELAY", "0s", "how long the name of a lease that expired (was not released) stays ungranted"}, &lockDelay},
		{configVar{"shutdown-timeout", "COORDINATOR_SHUTDOWN_TIMEOUT", "10s", "how long a graceful shutdown waits for calls in flight"}, &shutdown},
		{configVar{"observe-reconcile", "COORDINATOR_OBSERVE_RECONCILE", "1s", "how often observers re-read an election without a notification"}, &reconcile},
		{configVar{"tls-cert", "COORDINATOR_TLS_CERT", "", "PEM certificate file: serve TLS"}, &c.TLSCert},
		{configVar{"tls-key", "COORDINATOR_TLS_KEY", "", "PEM private key file of -tls-cert"}, &c.TLSKey},
		{configVar{"tls-client-ca", "COORDINATOR_TLS_CLIENT_CA", "", "PEM CA file: require client certificates it signed (mTLS)"}, &c.TLSClientCA},
		{configVar{"auth-token", "COORDINATOR_AUTH_TOKEN", "", "require 'authorization: Bearer TOKEN' on every call but health checks"}, &c.AuthToken},
		{configVar{"log-level", "COORDINATOR_LOG_LEVEL", "info", "debug, info, warn or error"}, &level},
		{configVar{"log-format", "COORDINATOR_LOG_FORMAT", "text", "text or json"}, &c.LogFormat},
	} {
		def := v.def
		if env := getenv(v.env); env != "" {
			def = env
		}
		fs.StringVar(v.dst, v.flag, def, fmt.Sprintf("%s [$%s]", v.usage, v.env))
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	var errs []error
	duration := func(name, s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return d
	}
	c.MaxTTL = duration("max-ttl", maxTTL)
	c.ShutdownTimeout = duration("shutdown-timeout", shutdown)
	c.LockDelay = duration("lock-delay", lockDelay)
	if c.LockDelay < 0 {
		errs = append(errs, errors.New("lock-delay: must not be negative"))
	}
	c.ObserveReconcile = duration("observe-reconcile", reconcile)
	if c.ObserveReconcile <= 0 {
		errs = append(errs, errors.New("observe-reconcile: must be positive"))
	}
	c.DataLossQuarantine = c.MaxTTL
	if quarantine != "" {
		c.DataLossQuarantine = duration("data-loss-quarantine", quarantine)
	}
	if err := c.LogLevel.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("log-level: %w", err))
	}
	switch {
	case c.MaxTTL < MinTTL:
		errs = append(errs, fmt.Errorf("max-ttl: %s is below the minimum TTL %s", c.MaxTTL, MinTTL))
	case c.DataLossQuarantine < 0:
		errs = append(errs, errors.New("data-loss-quarantine: must not be negative"))
	}
	if c.Store != StoreMemory && c.Store != StoreRedis {
		errs = append(errs, fmt.Errorf("store: %q is neither %s nor %s", c.Store, StoreMemory, StoreRedis))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log-format: %q is neither text nor json", c.LogFormat))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("tls-cert and tls-key go together"))
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		errs = append(errs, errors.New("tls-client-ca needs tls-cert and tls-key"))
	}
	if strings.ContainsAny(c.RedisKeyPrefix, "{}") {
		errs = append(errs, errors.New("redis-key-prefix: must not contain braces (they are Redis Cluster hash tags)"))
	}
	return c, errors.Join(errs...)
}
