// Command housekeeper runs Deckard's unlock and timeout tasks against its
// Redis, in parallel batches. Instances hold a membership lease each on the
// coordinator; the elected one publishes who is in, every queue's tasks
// belong to one member of that view, and each batch carries the view's
// fencing token, so that any number of instances can run side by side.
//
// Every flag has an environment variable (see -help); a flag wins.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/housekeeper"
	"github.com/coordinator-dev/coordinator/housekeeper/storage"
	"github.com/coordinator-dev/coordinator/internal/app"
	"github.com/coordinator-dev/coordinator/internal/envflag"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
	"github.com/coordinator-dev/coordinator/internal/telemetry"
)

// config is the housekeeper's configuration.
type config struct {
	coordinatorAddr  string
	coordinatorToken string
	// insecureToken allows the token over a plaintext connection.
	insecureToken bool
	// coordinatorTLS: reach the coordinator over TLS, verified with tls.CA
	// or the system roots, presenting tls.Cert when set (mTLS).
	coordinatorTLS bool
	tls            app.TLSFiles
	redisURL       string
	// storage is Deckard's MongoDB (storage.URI empty: the storage tasks
	// are off).
	storage       storage.Config
	instanceID    string
	metricsListen string
	log           app.LogConfig
	membership    housekeeper.MembershipConfig
	runner        housekeeper.Config
	// printVersion (-version) asks for the version instead of a run.
	printVersion bool
	// tracing is what the OTEL_* variables ask of tracing: when on, the
	// coordinator client's calls are traced and carry their trace context.
	tracing telemetry.Config
}

const (
	envToken      = "HOUSEKEEPER_COORDINATOR_TOKEN"
	envRedisURL   = "HOUSEKEEPER_REDIS_URL"
	envStorageURI = "HOUSEKEEPER_STORAGE_URI"
)

func parseConfig(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) (config, error) {
	var c config
	host, _ := os.Hostname()
	v := envflag.New(fs, lookupEnv)
	v.String(&c.coordinatorAddr, "coordinator-addr", "HOUSEKEEPER_COORDINATOR_ADDR", "127.0.0.1:7400", "coordinator address")
	// The token and the Redis URL (which may hold a password) are secrets:
	// -help prints defaults, never their variables.
	v.Secret(&c.coordinatorToken, "coordinator-token", envToken, "",
		"bearer token for the coordinator; sent over TLS only, unless -coordinator-insecure-token")
	v.Bool(&c.insecureToken, "coordinator-insecure-token", "HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN", false,
		"send -coordinator-token over a plaintext connection too: for loopback and tests only, as anyone on the path can read it")
	v.Bool(&c.coordinatorTLS, "coordinator-tls", "HOUSEKEEPER_COORDINATOR_TLS", false,
		"reach the coordinator over TLS, verified with the system roots unless -coordinator-tls-ca (implied by the other -coordinator-tls-* flags)")
	v.String(&c.tls.CA, "coordinator-tls-ca", "HOUSEKEEPER_COORDINATOR_TLS_CA", "", "PEM CA file to verify the coordinator with: reach it over TLS")
	v.String(&c.tls.Cert, "coordinator-tls-cert", "HOUSEKEEPER_COORDINATOR_TLS_CERT", "", "PEM client certificate file, for a coordinator that requires mTLS")
	v.String(&c.tls.Key, "coordinator-tls-key", "HOUSEKEEPER_COORDINATOR_TLS_KEY", "", "PEM private key file of -coordinator-tls-cert")
	v.Secret(&c.redisURL, "redis-url", envRedisURL, "redis://127.0.0.1:6379/0",
		"Deckard's Redis (standalone, redis+sentinel:// or redis+cluster://)")
	v.Secret(&c.storage.URI, "storage-uri", envStorageURI, "",
		"Deckard's MongoDB (mongodb:// or mongodb+srv://, as Deckard's DECKARD_STORAGE_URI): turns on the TTL, max-elements, recovery and metrics tasks; empty: unlock and timeout only")
	v.String(&c.storage.Database, "mongo-database", "HOUSEKEEPER_MONGO_DATABASE", storage.DefaultDatabase, "Deckard's database (its mongo.database)")
	v.String(&c.storage.Collection, "mongo-collection", "HOUSEKEEPER_MONGO_COLLECTION", storage.DefaultCollection, "Deckard's messages collection (its mongo.collection)")
	v.String(&c.storage.ConfigurationCollection, "mongo-queue-configuration-collection", "HOUSEKEEPER_MONGO_QUEUE_CONFIGURATION_COLLECTION",
		storage.DefaultConfigurationCollection, "Deckard's queue configurations (its mongo.queue_configuration_collection)")
	v.Duration(&c.runner.Storage.Interval, "storage-interval", "HOUSEKEEPER_STORAGE_INTERVAL", housekeeper.DefaultStorageInterval,
		"how often TTL, max elements and recovery look for work (Deckard's task delays); a task with work left goes on at once")
	v.Duration(&c.runner.Storage.MetricsInterval, "metrics-interval", "HOUSEKEEPER_METRICS_INTERVAL", housekeeper.DefaultMetricsInterval,
		"how often the queue metrics (deckard_total_messages, deckard_oldest_message) are read from storage")
	v.Duration(&c.runner.Storage.ConfigInterval, "max-elements-read-interval", "HOUSEKEEPER_MAX_ELEMENTS_READ_INTERVAL", housekeeper.DefaultConfigInterval,
		"how often the queues' max_elements are read from storage")
	v.Duration(&c.runner.Storage.RecheckInterval, "max-elements-recount-interval", "HOUSEKEEPER_MAX_ELEMENTS_RECOUNT_INTERVAL", housekeeper.DefaultRecheckInterval,
		"how often a queue with max_elements is counted in storage although its cache did not grow past it")
	v.Int(&c.runner.Storage.TTLBatch, "ttl-batch", "HOUSEKEEPER_TTL_BATCH", housekeeper.DefaultTTLBatch, "most expired messages one TTL step reads and deletes (Deckard's 10000)")
	v.Int(&c.runner.Storage.RecoveryBatch, "recovery-batch", "HOUSEKEEPER_RECOVERY_BATCH", housekeeper.DefaultRecoveryBatch, "most messages one recovery batch copies (Deckard's 4000)")
	v.String(&c.runner.Prefix, "prefix", "HOUSEKEEPER_PREFIX", housekeeper.DefaultPrefix, "Deckard's Redis key prefix")
	v.String(&c.instanceID, "instance-id", "HOUSEKEEPER_INSTANCE_ID", fmt.Sprintf("%s-%d", host, os.Getpid()), "this instance's name, as the coordinator sees it")
	v.String(&c.metricsListen, "metrics-listen", "HOUSEKEEPER_METRICS_LISTEN", "127.0.0.1:7402", "Prometheus /metrics listen address (empty: off)")
	v.Duration(&c.runner.DiscoveryInterval, "discovery-interval", "HOUSEKEEPER_DISCOVERY_INTERVAL", housekeeper.DefaultDiscoveryInterval,
		"time between the SCANs that find the queues, which the instances take in turn: a new queue, or a set that was empty, is found within two of it")
	v.Duration(&c.runner.ProbeInterval, "probe-interval", "HOUSEKEEPER_PROBE_INTERVAL", housekeeper.DefaultProbeInterval,
		"how often the earliest message of every set this instance owns is read, pipelined: every message is moved within about this of falling due, and an idle instance costs Redis about (its sets / this) ZRANGEs a second")
	v.Int(&c.runner.BatchSize, "batch-size", "HOUSEKEEPER_BATCH_SIZE", housekeeper.DefaultBatchSize, "most messages one batch moves")
	v.Int(&c.runner.Parallelism, "parallelism", "HOUSEKEEPER_PARALLELISM", housekeeper.DefaultParallelism, "most batches in flight at once")
	v.Duration(&c.membership.TTL, "lease-ttl", "HOUSEKEEPER_LEASE_TTL", housekeeper.DefaultMembershipTTL,
		"TTL of this instance's membership lease and of the leadership: a dead instance's queues are taken over within it plus -membership-check")
	v.Duration(&c.membership.CheckInterval, "membership-check", "HOUSEKEEPER_MEMBERSHIP_CHECK", 0,
		"how often the leader lists the members (default: a quarter of -lease-ttl)")
	v.String(&c.membership.Namespace, "lease-namespace", "HOUSEKEEPER_LEASE_NAMESPACE", "", "prefix of the coordinator names (membership, election, view), for several Deckards on one coordinator")
	v.String(&c.membership.Election, "election", "HOUSEKEEPER_ELECTION", housekeeper.DefaultElection, "election (behind -lease-namespace) whose leader publishes the membership and reports the queue gauges")
	c.log.Flags(v, "HOUSEKEEPER")
	fs.BoolVar(&c.printVersion, "version", false, "print the version and VCS revision, and exit")
	err := v.Parse(args)
	switch {
	case c.printVersion:
		return c, nil // -version works whatever else the environment holds
	case err != nil:
		return c, err
	}
	var errs []error
	if err := c.log.Check(); err != nil {
		errs = append(errs, err)
	}
	if c.tracing, err = telemetry.FromEnv(lookupEnv); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"discovery-interval", c.runner.DiscoveryInterval}, {"probe-interval", c.runner.ProbeInterval}, {"lease-ttl", c.membership.TTL},
		{"storage-interval", c.runner.Storage.Interval}, {"metrics-interval", c.runner.Storage.MetricsInterval},
		{"max-elements-read-interval", c.runner.Storage.ConfigInterval}, {"max-elements-recount-interval", c.runner.Storage.RecheckInterval},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive", d.name))
		}
	}
	if c.membership.CheckInterval < 0 {
		errs = append(errs, errors.New("membership-check: must not be negative"))
	}
	if strings.Contains(c.instanceID, "/") || c.instanceID == "" {
		errs = append(errs, errors.New("instance-id: must be non-empty, without '/'"))
	}
	if c.runner.BatchSize < 1 || c.runner.Parallelism < 1 {
		errs = append(errs, errors.New("batch-size and parallelism: must be at least 1"))
	}
	if c.runner.Storage.TTLBatch < 1 || c.runner.Storage.RecoveryBatch < 1 {
		errs = append(errs, errors.New("ttl-batch and recovery-batch: must be at least 1"))
	}
	if u := c.storage.URI; u != "" && !strings.HasPrefix(u, "mongodb://") && !strings.HasPrefix(u, "mongodb+srv://") {
		errs = append(errs, errors.New("storage-uri: must start with mongodb:// or mongodb+srv://"))
	}
	if _, err := redisurl.Parse(c.redisURL); err != nil {
		errs = append(errs, fmt.Errorf("redis-url: %w", err))
	}
	if (c.tls.Cert == "") != (c.tls.Key == "") {
		errs = append(errs, errors.New("coordinator-tls-cert and coordinator-tls-key go together"))
	}
	c.coordinatorTLS = c.coordinatorTLS || c.tls.CA != "" || c.tls.Cert != ""
	if c.coordinatorToken != "" && !c.coordinatorTLS && !c.insecureToken {
		errs = append(errs, errors.New("coordinator-token: refusing to send it over plaintext, where anyone on the path can read it; "+
			"reach the coordinator over TLS (-coordinator-tls, -coordinator-tls-ca), or set -coordinator-insecure-token on loopback"))
	}
	c.membership.ID = c.instanceID
	return c, errors.Join(errs...)
}

// storageConnectTimeout bounds the first contact with the storage: an
// instance that cannot reach it exits, for its supervisor to restart it.
const storageConnectTimeout = 30 * time.Second

func main() {
	fs := flag.NewFlagSet("housekeeper", flag.ContinueOnError)
	cfg, err := parseConfig(fs, os.Args[1:], os.LookupEnv)
	if err != nil {
		os.Exit(app.ParseError(os.Stderr, "housekeeper", err))
	}
	if cfg.printVersion {
		fmt.Print(app.BuildVersion().Text("housekeeper"))
		return
	}
	log := cfg.log.Logger(os.Stderr).With("instance", cfg.instanceID)

	ctx, stop := app.SignalContext(context.Background())
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("housekeeper failed", "err", err)
		stop()
		os.Exit(app.ExitFail)
	}
}

// clientOptions are the coordinator client's options for cfg.
func clientOptions(cfg config, log *slog.Logger) ([]client.Option, error) {
	opts := []client.Option{client.WithIdentity(cfg.instanceID), client.WithLogger(log)}
	if cfg.coordinatorTLS {
		tlsCfg, err := app.ClientTLS(cfg.tls)
		if err != nil {
			return nil, fmt.Errorf("coordinator TLS: %w", err)
		}
		opts = append(opts, client.WithTLS(tlsCfg))
	}
	switch {
	case cfg.coordinatorToken == "":
	case cfg.coordinatorTLS:
		opts = append(opts, client.WithBearerToken(cfg.coordinatorToken))
	case cfg.insecureToken:
		opts = append(opts, client.WithInsecureBearerToken(cfg.coordinatorToken))
	default: // parseConfig refuses this; the client would too
		return nil, errors.New("coordinator token over plaintext without -coordinator-insecure-token")
	}
	return opts, nil
}

// run works until ctx ends, or until the metrics endpoint fails: then it
// finishes the batches in flight, leaves the membership and resigns.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	rdb, err := redisurl.NewClient(cfg.redisURL)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer func() { _ = rdb.Close() }()

	opts, err := clientOptions(cfg, log)
	if err != nil {
		return err
	}
	for _, w := range cfg.tracing.Warnings {
		log.Warn("tracing: " + w)
	}
	if cfg.tracing.Enabled {
		v := app.BuildVersion()
		tr, err := telemetry.Start(ctx, cfg.tracing, telemetry.Service{Name: "housekeeper", Version: cmp.Or(v.Release, v.ModuleVersion)}, log)
		if err != nil {
			return err
		}
		// After the client's Close (deferred below, so run first): its
		// last calls are flushed too.
		defer func() {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tr.Shutdown(fctx); err != nil {
				log.Warn("tracing: spans may be lost", "err", err)
			}
		}()
		opts = append(opts, client.WithTracerProvider(tr.Provider))
		log.Info("tracing on: exporting spans over OTLP", "protocol", cfg.tracing.Protocol, "sampler", cfg.tracing.Sampler)
	}
	coord, err := client.New(cfg.coordinatorAddr, opts...)
	if err != nil {
		return fmt.Errorf("coordinator client: %w", err)
	}
	// Close's error is the connection's, nothing to act on at exit. It
	// releases what is still held (the leadership) within its own timeout,
	// after ctx has ended.
	defer func() { _ = coord.Close() }()

	if cfg.storage.URI == "" {
		log.Warn("no -storage-uri: running unlock and timeout only; keep Deckard's own housekeeper on for TTL, max elements, recovery and the queue metrics")
	} else {
		sctx, cancel := context.WithTimeout(ctx, storageConnectTimeout)
		st, err := storage.Open(sctx, cfg.storage)
		cancel()
		if err != nil {
			return err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = st.Close(dctx) // nothing to act on at exit
		}()
		cfg.runner.Storage.Storage = st
	}

	registry := app.NewRegistry()
	var runner *housekeeper.Runner
	mcfg := cfg.membership
	mcfg.Logger = log
	mcfg.OnLeading = func(leading bool) { runner.SetLeader(leading) }
	member, err := housekeeper.NewCoordinatorMembership(coord, mcfg)
	if err != nil {
		return err
	}
	rcfg := cfg.runner
	rcfg.Logger, rcfg.Registerer = log, registry
	if runner, err = housekeeper.New(rdb, member, rcfg); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	metricsFailed := make(chan error, 1)
	if cfg.metricsListen != "" {
		metrics, err := app.ServeMetrics(cfg.metricsListen, registry, log)
		if err != nil {
			return err
		}
		// An instance that cannot be watched stops, rather than work unseen.
		go func() {
			if err := <-metrics.Done(); err != nil {
				metricsFailed <- fmt.Errorf("serve metrics: %w", err)
				cancel()
			}
		}()
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := metrics.Shutdown(shutdownCtx); err != nil {
				log.Warn("metrics shutdown", "err", err)
			}
		}()
	}

	log.Info("housekeeper running", "coordinator", cfg.coordinatorAddr, "tls", cfg.coordinatorTLS,
		"redis", redisurl.Redact(cfg.redisURL), "prefix", rcfg.Prefix, "parallelism", rcfg.Parallelism, "lease_ttl", mcfg.TTL,
		"storage", cfg.storage.URI != "", "database", cfg.storage.Database)
	var wg sync.WaitGroup
	var memberErr error
	wg.Go(func() {
		// A membership the coordinator refuses outright (a credential that
		// may not use the names) stops the instance: it could never work.
		if memberErr = member.Run(ctx); memberErr != nil {
			cancel()
		}
	})
	err = runner.Run(ctx)
	wg.Wait()
	err = errors.Join(err, memberErr)
	select {
	case mErr := <-metricsFailed:
		err = errors.Join(err, mErr)
	default:
	}
	log.Info("housekeeper stopped")
	return err
}
