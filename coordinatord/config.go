package coordinatord

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/coordinator-dev/coordinator/internal/app"
	"github.com/coordinator-dev/coordinator/internal/envflag"
	"github.com/coordinator-dev/coordinator/internal/telemetry"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/limits"
	"github.com/coordinator-dev/coordinator/server/store"
)

// Config is the coordinator's configuration. Every field has a flag and an
// environment variable; a flag given on the command line wins.
type Config struct {
	Listen             string
	MetricsListen      string
	HealthListen       string
	Store              string
	RedisURL           string
	RedisKeyPrefix     string
	MaxTTL             time.Duration
	DataLossQuarantine time.Duration
	LockDelay          time.Duration
	ShutdownTimeout    time.Duration
	ObserveReconcile   time.Duration
	// IdleNameTTL is how long a name's state outlives its last use in the
	// store.
	IdleNameTTL time.Duration
	// StoreTimeout bounds every store call.
	StoreTimeout time.Duration
	// StateDir keeps the memory store's crash-safety bounds; empty turns
	// persistence off.
	StateDir string
	// RedisNewStore says that the Redis is new: missing data-loss markers
	// are written without a quarantine, instead of read as data lost while
	// no coordinator ran.
	RedisNewStore bool
	// RedisMinReplicas replicas must acknowledge a grant or renewal within
	// RedisReplicaTimeout before it is reported (0: no wait).
	RedisMinReplicas    int
	RedisReplicaTimeout time.Duration
	// TLS is the server's certificate and key, and with CA, the CA that
	// signs the client certificates mTLS requires.
	TLS       app.TLSFiles
	AuthToken string
	// AccessFile grants credentials name prefixes (see server/access);
	// re-read on SIGHUP.
	AccessFile string
	Limits     limits.Config
	Log        app.LogConfig
	// CPUProfile, when set, is the file that a CPU profile of the whole
	// run is written to at a clean shutdown.
	CPUProfile string
	// PrintVersion (-version) asks for the version instead of a run; the
	// rest of the configuration is then not checked.
	PrintVersion bool
	// Tracing is what the OTEL_* variables ask of tracing (package
	// telemetry): off unless they turn it on. It has no flags: the
	// variables are OpenTelemetry's, the same for every program.
	Tracing telemetry.Config
	// TracerProvider, when set, traces the coordinator with it instead of
	// what Tracing asks for (tests, and programs that embed a coordinator);
	// its giver shuts it down.
	TracerProvider trace.TracerProvider
}

// DefaultStateDir is where `make run` keeps the memory store's state: under
// the working directory, ignored by git.
const DefaultStateDir = ".coordinator-state"

// Store kinds.
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// ParseConfig reads the configuration from args (without the program name)
// and the environment (lookupEnv is os.LookupEnv). The usage text names the
// environment variable of every flag.
func ParseConfig(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	var c Config
	v := envflag.New(fs, lookupEnv)
	v.String(&c.Listen, "listen", "COORDINATOR_LISTEN", "127.0.0.1:7400", "gRPC listen address")
	v.String(&c.MetricsListen, "metrics-listen", "COORDINATOR_METRICS_LISTEN", "127.0.0.1:7401", "Prometheus /metrics listen address (empty: off)")
	v.String(&c.HealthListen, "health-listen", "COORDINATOR_HEALTH_LISTEN", "", "plaintext listen address serving gRPC health checks only, for probes that cannot speak TLS (empty: off)")
	v.String(&c.Store, "store", "COORDINATOR_STORE", StoreMemory, "lease store: memory or redis")
	v.Secret(&c.RedisURL, "redis-url", "COORDINATOR_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL (standalone, Sentinel or Cluster) for -store=redis")
	v.String(&c.RedisKeyPrefix, "redis-key-prefix", "COORDINATOR_REDIS_KEY_PREFIX", "coordinator", "prefix of every Redis key the coordinator writes")
	v.Duration(&c.MaxTTL, "max-ttl", "COORDINATOR_MAX_TTL", server.DefaultMaxTTL, "longest lease TTL a client may ask for")
	var quarantineSet bool
	v.OptionalDuration(&c.DataLossQuarantine, &quarantineSet, "data-loss-quarantine", "COORDINATOR_DATA_LOSS_QUARANTINE", "how long grants stop after the store lost its data, a `duration` (default: max-ttl; 0: off)")
	v.Duration(&c.LockDelay, "lock-delay", "COORDINATOR_LOCK_DELAY", 0, "how long the name of a lease that expired (was not released) stays ungranted")
	v.Duration(&c.ObserveReconcile, "observe-reconcile", "COORDINATOR_OBSERVE_RECONCILE", server.DefaultReconcile, "how often, on average, observers re-read an election without a notification (a safety net)")
	var idleSet bool
	v.OptionalDuration(&c.IdleNameTTL, &idleSet, "idle-name-ttl", "COORDINATOR_IDLE_NAME_TTL", fmt.Sprintf("how long the store keeps a name nobody holds, waits for or observes, a `duration` at least max-ttl + lock-delay (default: %s, or max-ttl + lock-delay if longer)", store.DefaultIdleNameTTL))
	v.Duration(&c.StoreTimeout, "store-timeout", "COORDINATOR_STORE_TIMEOUT", store.DefaultCallTimeout, "how long one store call may take before it fails as unavailable")
	v.String(&c.StateDir, "state-dir", "COORDINATOR_STATE_DIR", DefaultStateDir, "directory where the memory store keeps what makes it crash-safe (empty: nothing is kept, and a restart may grant a name whose old lease still lives)")
	v.Bool(&c.RedisNewStore, "redis-new-store", "COORDINATOR_REDIS_NEW_STORE", false, "the Redis is new: start without the data-loss quarantine that missing markers otherwise mean (first start of a deployment only)")
	v.Int(&c.RedisMinReplicas, "redis-min-replicas", "COORDINATOR_REDIS_MIN_REPLICAS", 0, "replicas that must acknowledge a grant or renewal (Redis WAIT) before it is reported; 0: none")
	v.Duration(&c.RedisReplicaTimeout, "redis-replica-timeout", "COORDINATOR_REDIS_REPLICA_TIMEOUT", 0, "how long a grant waits for -redis-min-replicas acknowledgements before it fails as unavailable; below store-timeout (0: half of it)")
	v.Duration(&c.ShutdownTimeout, "shutdown-timeout", "COORDINATOR_SHUTDOWN_TIMEOUT", 10*time.Second, "how long a graceful shutdown waits for calls in flight")
	v.String(&c.TLS.Cert, "tls-cert", "COORDINATOR_TLS_CERT", "", "PEM certificate file: serve TLS")
	v.String(&c.TLS.Key, "tls-key", "COORDINATOR_TLS_KEY", "", "PEM private key file of -tls-cert")
	v.String(&c.TLS.CA, "tls-client-ca", "COORDINATOR_TLS_CLIENT_CA", "", "PEM CA file: require client certificates it signed (mTLS)")
	v.Secret(&c.AuthToken, "auth-token", "COORDINATOR_AUTH_TOKEN", "", "require 'authorization: Bearer TOKEN' on every call but health checks; this token may use every name")
	v.String(&c.AccessFile, "access-file", "COORDINATOR_ACCESS_FILE", "", "file granting bearer tokens and client certificates name prefixes, re-read on SIGHUP (empty: none)")
	limitFlag(v, &c.Limits.StreamsPerConn, limits.StreamsPerConn, limits.DefaultStreamsPerConn, "most streams one client connection may have open")
	limitFlag(v, &c.Limits.Streams, limits.Streams, limits.DefaultStreams, "most streams open on this coordinator")
	limitFlag(v, &c.Limits.WaitsPerConn, limits.WaitsPerConn, limits.DefaultWaitsPerConn, "most TryAcquire/Campaign calls with a wait one client connection may have in progress")
	limitFlag(v, &c.Limits.Waits, limits.Waits, limits.DefaultWaits, "most TryAcquire/Campaign calls with a wait in progress on this coordinator")
	limitFlag(v, &c.Limits.LeasesPerHolder, limits.LeasesPerHolder, limits.DefaultLeasesPerHolder, "most leases one holder may hold through this coordinator")
	limitFlag(v, &c.Limits.HoldersPerName, limits.HoldersPerName, limits.DefaultHoldersPerName, "most grants one name (a semaphore) may carry at once, lock delays included")
	c.Log.Flags(v, "COORDINATOR")
	v.String(&c.CPUProfile, "cpu-profile", "COORDINATOR_CPU_PROFILE", "", "write a CPU profile of the whole run to this `file` at a clean shutdown, for go tool pprof (diagnosis; empty: off)")
	fs.BoolVar(&c.PrintVersion, "version", false, "print the version and VCS revision, and exit")
	err := v.Parse(args)
	switch {
	case c.PrintVersion:
		return c, nil // -version works whatever else the environment holds
	case err != nil:
		return c, err
	}

	var errs []error
	if c.Tracing, err = telemetry.FromEnv(lookupEnv); err != nil {
		errs = append(errs, err)
	}
	if !quarantineSet {
		c.DataLossQuarantine = c.MaxTTL
	}
	// A name must outlive its longest lease and the lock delay after it, or
	// the store would forget a name still held or still delayed.
	if minIdle := c.MaxTTL + c.LockDelay; !idleSet {
		c.IdleNameTTL = max(store.DefaultIdleNameTTL, minIdle)
	} else if c.IdleNameTTL < minIdle {
		errs = append(errs, fmt.Errorf("idle-name-ttl: %s is below max-ttl + lock-delay (%s + %s): a name must outlive its longest lease and the lock delay after it", c.IdleNameTTL, c.MaxTTL, c.LockDelay))
	}
	if c.StoreTimeout <= 0 {
		errs = append(errs, errors.New("store-timeout: must be positive"))
	}
	for _, l := range []struct {
		n   int
		cap limits.Cap
	}{
		{c.Limits.StreamsPerConn, limits.StreamsPerConn},
		{c.Limits.Streams, limits.Streams},
		{c.Limits.WaitsPerConn, limits.WaitsPerConn},
		{c.Limits.Waits, limits.Waits},
		{c.Limits.LeasesPerHolder, limits.LeasesPerHolder},
		{c.Limits.HoldersPerName, limits.HoldersPerName},
	} {
		if l.n < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative (0: no limit)", l.cap.Flag))
		}
	}
	if c.ObserveReconcile <= 0 {
		errs = append(errs, errors.New("observe-reconcile: must be positive"))
	}
	if c.LockDelay < 0 {
		errs = append(errs, errors.New("lock-delay: must not be negative"))
	}
	if c.RedisMinReplicas < 0 {
		errs = append(errs, errors.New("redis-min-replicas: must not be negative"))
	}
	if c.RedisReplicaTimeout < 0 || (c.RedisReplicaTimeout > 0 && c.RedisReplicaTimeout >= c.StoreTimeout) {
		errs = append(errs, fmt.Errorf("redis-replica-timeout: must be below store-timeout (%s); 0 means half of it", c.StoreTimeout))
	}
	switch {
	case c.MaxTTL < server.MinTTL:
		errs = append(errs, fmt.Errorf("max-ttl: %s is below the minimum TTL %s", c.MaxTTL, server.MinTTL))
	case c.DataLossQuarantine < 0:
		errs = append(errs, errors.New("data-loss-quarantine: must not be negative"))
	}
	if c.Store != StoreMemory && c.Store != StoreRedis {
		errs = append(errs, fmt.Errorf("store: %q is neither %s nor %s", c.Store, StoreMemory, StoreRedis))
	}
	if err := c.Log.Check(); err != nil {
		errs = append(errs, err)
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		errs = append(errs, errors.New("tls-cert and tls-key go together"))
	}
	if c.TLS.CA != "" && c.TLS.Cert == "" {
		errs = append(errs, errors.New("tls-client-ca needs tls-cert and tls-key"))
	}
	if strings.ContainsAny(c.RedisKeyPrefix, "{}") {
		errs = append(errs, errors.New("redis-key-prefix: must not contain braces (they are Redis Cluster hash tags)"))
	}
	return c, errors.Join(errs...)
}

// limitFlag defines the setting of one cap, named as its refusals name it.
func limitFlag(v *envflag.Set, p *int, c limits.Cap, def int, text string) {
	v.Int(p, c.Flag, c.Env, def, text+" (0: no limit)")
}
