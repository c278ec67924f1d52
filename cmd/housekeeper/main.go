// Command housekeeper runs Deckard's unlock and timeout tasks against its
// Redis, in parallel batches, each gated and fenced by a coordinator lease,
// so that any number of instances can run side by side.
//
// Every flag has an environment variable (see -help); a flag wins.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/housekeeper"
	"github.com/coordinator-dev/coordinator/internal/envflag"
	"github.com/coordinator-dev/coordinator/internal/logging"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

// config is the housekeeper's configuration.
type config struct {
	coordinatorAddr  string
	coordinatorToken string
	coordinatorCA    string
	redisURL         string
	instanceID       string
	metricsListen    string
	election         string
	logLevel         slog.Level
	logFormat        string
	runner           housekeeper.Config
}

func parseConfig(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) (config, error) {
	var c config
	var level string
	host, _ := os.Hostname()
	v := envflag.New(fs, lookupEnv)
	v.String(&c.coordinatorAddr, "coordinator-addr", "HOUSEKEEPER_COORDINATOR_ADDR", "127.0.0.1:7400", "coordinator address")
	v.String(&c.coordinatorToken, "coordinator-token", "HOUSEKEEPER_COORDINATOR_TOKEN", "", "bearer token for the coordinator")
	v.String(&c.coordinatorCA, "coordinator-tls-ca", "HOUSEKEEPER_COORDINATOR_TLS_CA", "", "PEM CA file: reach the coordinator over TLS")
	v.String(&c.redisURL, "redis-url", "HOUSEKEEPER_REDIS_URL", "redis://127.0.0.1:6379/0", "Deckard's Redis (standalone, redis+sentinel:// or redis+cluster://)")
	v.String(&c.runner.Prefix, "prefix", "HOUSEKEEPER_PREFIX", housekeeper.DefaultPrefix, "Deckard's Redis key prefix")
	v.String(&c.instanceID, "instance-id", "HOUSEKEEPER_INSTANCE_ID", fmt.Sprintf("%s-%d", host, os.Getpid()), "this instance's name, as the coordinator sees it")
	v.String(&c.metricsListen, "metrics-listen", "HOUSEKEEPER_METRICS_LISTEN", "127.0.0.1:7402", "Prometheus /metrics listen address (empty: off)")
	v.Duration(&c.runner.UnlockInterval, "unlock-interval", "HOUSEKEEPER_UNLOCK_INTERVAL", housekeeper.DefaultInterval, "time between unlock cycles")
	v.Duration(&c.runner.TimeoutInterval, "timeout-interval", "HOUSEKEEPER_TIMEOUT_INTERVAL", housekeeper.DefaultInterval, "time between timeout cycles")
	v.Int(&c.runner.BatchSize, "batch-size", "HOUSEKEEPER_BATCH_SIZE", housekeeper.DefaultBatchSize, "most messages one batch moves")
	v.Int(&c.runner.Parallelism, "parallelism", "HOUSEKEEPER_PARALLELISM", housekeeper.DefaultParallelism, "most queues worked at once")
	v.Duration(&c.runner.LeaseTTL, "lease-ttl", "HOUSEKEEPER_LEASE_TTL", housekeeper.DefaultLeaseTTL, "TTL of each queue's lease; a dead instance's queues are taken over within it")
	v.String(&c.runner.LeaseNamespace, "lease-namespace", "HOUSEKEEPER_LEASE_NAMESPACE", "", "prefix of lease and election names, for several Deckards on one coordinator")
	v.String(&c.election, "election", "HOUSEKEEPER_ELECTION", "housekeeper/leader", "election whose leader reports the queue gauges")
	v.String(&level, "log-level", "HOUSEKEEPER_LOG_LEVEL", "info", "debug, info, warn or error")
	v.String(&c.logFormat, "log-format", "HOUSEKEEPER_LOG_FORMAT", "text", "text or json")
	if err := v.Parse(args); err != nil {
		return c, err
	}
	var errs []error
	if err := c.logLevel.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("log-level: %w", err))
	}
	if err := logging.CheckFormat(c.logFormat); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"unlock-interval", c.runner.UnlockInterval}, {"timeout-interval", c.runner.TimeoutInterval}, {"lease-ttl", c.runner.LeaseTTL}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive", d.name))
		}
	}
	if c.runner.BatchSize < 1 || c.runner.Parallelism < 1 {
		errs = append(errs, errors.New("batch-size and parallelism: must be at least 1"))
	}
	if _, err := redisurl.Parse(c.redisURL); err != nil {
		errs = append(errs, fmt.Errorf("redis-url: %w", err))
	}
	if c.runner.LeaseNamespace != "" {
		c.election = strings.TrimSuffix(c.runner.LeaseNamespace, "/") + "/" + c.election
	}
	return c, errors.Join(errs...)
}

func main() {
	fs := flag.NewFlagSet("housekeeper", flag.ContinueOnError)
	cfg, err := parseConfig(fs, os.Args[1:], os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "housekeeper: %v\n", err)
		os.Exit(2)
	}
	log := logging.New(os.Stderr, cfg.logLevel, cfg.logFormat).With("instance", cfg.instanceID)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("housekeeper failed", "err", err)
		os.Exit(1)
	}
}

// run works until ctx ends: then it finishes the batches in flight,
// releases its leases and resigns.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	rdb, err := redisurl.NewClient(cfg.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()

	clientOpts := []client.Option{client.WithIdentity(cfg.instanceID), client.WithLogger(log)}
	if cfg.coordinatorToken != "" {
		clientOpts = append(clientOpts, client.WithBearerToken(cfg.coordinatorToken))
	}
	if cfg.coordinatorCA != "" {
		pem, err := os.ReadFile(cfg.coordinatorCA)
		if err != nil {
			return fmt.Errorf("read coordinator CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("coordinator CA %s holds no PEM certificate", cfg.coordinatorCA)
		}
		clientOpts = append(clientOpts, client.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	coord, err := client.New(cfg.coordinatorAddr, clientOpts...)
	if err != nil {
		return fmt.Errorf("coordinator client: %w", err)
	}
	defer coord.Close()

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rcfg := cfg.runner
	rcfg.Logger, rcfg.Registerer = log, registry
	runner, err := housekeeper.New(rdb, housekeeper.CoordinatorLocker(coord), rcfg)
	if err != nil {
		return err
	}
	runner.SetLeader(false)

	var metricsServer *http.Server
	if cfg.metricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
		metricsServer = &http.Server{Addr: cfg.metricsListen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := metricsServer.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server failed", "err", err)
			}
		}()
	}

	log.Info("housekeeper running", "coordinator", cfg.coordinatorAddr, "redis", redisurl.Redact(cfg.redisURL),
		"prefix", rcfg.Prefix, "parallelism", rcfg.Parallelism, "lease_ttl", rcfg.LeaseTTL)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := runner.Lead(ctx, coord, cfg.election); err != nil {
			log.Error("leader election stopped", "err", err)
		}
	})
	err = runner.Run(ctx)
	wg.Wait()
	log.Info("housekeeper stopped: batches finished, leases released")
	if metricsServer != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = metricsServer.Shutdown(shutdownCtx)
	}
	return err
}
