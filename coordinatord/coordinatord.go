package coordinatord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/app"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/access"
	"github.com/coordinator-dev/coordinator/server/limits"
	"github.com/coordinator-dev/coordinator/server/protocodec"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
	"github.com/coordinator-dev/coordinator/server/store/redisstore"
)

// Server is a whole coordinator: the gRPC service with health, reflection
// and interceptors, its store, and its metrics registry.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	tracing  *tracing // nil when off
	service  *server.Service
	grpc     *grpc.Server
	health   *health.Server
	registry *prometheus.Registry
	// access is nil when every caller may use every name.
	access        *access.Authorizer
	accessReloads *prometheus.CounterVec
	storeUp       prometheus.Gauge

	// watchCtx ends the store health loop; serving, closed by Serve, lets
	// it begin.
	watchCtx    context.Context
	stopWatch   context.CancelFunc
	watching    sync.WaitGroup
	serving     chan struct{}
	servingOnce sync.Once
}

// maxRecvMsgBytes bounds a request. The largest valid one is a Campaign with
// a 64 KiB value, a 256-byte election and a 128-byte candidate; anything
// much larger is refused before it is read, instead of gRPC's default 4 MiB.
const maxRecvMsgBytes = 96 << 10

// maxHeaderListBytes bounds a call's metadata (gRPC's default is 16 MiB):
// a bearer token, even a large JWT, fits many times over.
const maxHeaderListBytes = 64 << 10

// streamWorkers is how many goroutines serve calls, each one at a time; a
// parked worker costs its stack (a few KiB to a few tens).
const streamWorkers = 256

// unaryHeadroom is how many streams a connection may have beyond its open
// and waiting caps (HTTP/2 MAX_CONCURRENT_STREAMS): room for its short unary
// calls, and for the streams over a cap to reach us and be refused.
const unaryHeadroom = 1024

// New opens the configured store and builds the server. Serve starts it.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	registry := app.NewRegistry()
	metrics := server.NewMetrics(registry)
	st, err := openStore(ctx, cfg, log, metrics, registry)
	if err != nil {
		return nil, err
	}
	creds, err := serverCredentials(cfg.TLS)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	authz, err := access.New(access.Config{
		File:      cfg.AccessFile,
		AuthToken: cfg.AuthToken,
		Parse:     access.ParseOptions{ClientCerts: cfg.TLS.CA != "", MaxPrefixBytes: server.MaxNameBytes},
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	tr, err := newTracing(ctx, cfg, log)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	if tr != nil {
		st = tr.wrapStore(st, cfg.Store)
	}
	limiter := limits.New(cfg.Limits, registry, log)
	codec := protocodec.New(server.InvalidField)

	grpcMetrics := newCallMetrics()
	registry.MustRegister(grpcMetrics)
	callLog := logging.LoggerFunc(func(ctx context.Context, level logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(level), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(callLogLevel),
	}
	observer := &callObserver{metrics: grpcMetrics, log: log, level: callLogLevel, codec: codec}
	panicked := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in a call", "panic", p)
		return status.Error(codes.Internal, "internal error")
	})
	// Order matters. Metrics and logging see every outcome; the codec's
	// check comes before anything that may refuse a call, so that it sees
	// every request; a caller is authenticated before anything is counted
	// for it; names are checked before a unary call takes a waiting place
	// or a lease, and after a stream took its place, so that what the access
	// check answers on an operation stream is counted like the rest. The
	// observer does the metrics, the log line and the codec's check of a
	// unary call in one step (calls.go): that chain runs on every call.
	unary := []grpc.UnaryServerInterceptor{
		observer.UnaryServerInterceptor(),
	}
	stream := []grpc.StreamServerInterceptor{
		observer.StreamServerInterceptor(),
		logging.StreamServerInterceptor(callLog, logOpts...),
		codec.StreamServerInterceptor(),
	}
	if tr != nil {
		// Before the interceptors that add theirs to each Stream
		// operation, so that an operation's span covers their checks too.
		stream = append(stream, tr.streams)
	}
	if authz != nil {
		unary = append(unary,
			forService(needsAuth, auth.UnaryServerInterceptor(authz.Authenticate)),
			forService(isCoordinator, authz.UnaryServerInterceptor()))
		stream = append(stream,
			selector.StreamServerInterceptor(auth.StreamServerInterceptor(authz.Authenticate), selector.MatchFunc(needsAuthCall)))
	}
	unary = append(unary, forService(isCoordinator, limiter.UnaryServerInterceptor()))
	stream = append(stream, selector.StreamServerInterceptor(limiter.StreamServerInterceptor(), selector.MatchFunc(needsAuthCall))) //nolint:contextcheck // a stream's context is its own, ss.Context()
	if authz != nil {
		stream = append(stream, selector.StreamServerInterceptor(authz.StreamServerInterceptor(), selector.MatchFunc(isCoordinatorCall)))
	}
	unary = append(unary, recovery.UnaryServerInterceptor(panicked))
	stream = append(stream, recovery.StreamServerInterceptor(panicked))
	if tr != nil {
		unary = append(unary, tr.countAttempts)
	}

	opts := []grpc.ServerOption{
		grpc.Creds(creds),
		grpc.ForceServerCodecV2(codec),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		// Calls run on long-lived workers, not a new goroutine each: a new
		// goroutine's stack grows, copied, through the interceptors and the
		// store on every call. Past this many calls at once, gRPC starts
		// goroutines as before.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.MaxRecvMsgSize(maxRecvMsgBytes),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		// Clients that keep streams open for long (Stream, Observe) ping;
		// allow it, and notice dead peers.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if tr != nil {
		opts = append(opts, tr.serverOption())
	}
	if l := cfg.Limits; l.StreamsPerConn > 0 && l.WaitsPerConn > 0 {
		// A client past this waits for a free stream instead of being
		// refused; the caps above refuse first.
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(min(l.StreamsPerConn+l.WaitsPerConn+unaryHeadroom, 1<<30))))
	}
	grpcServer := grpc.NewServer(opts...)
	svc := server.NewService(st, server.ServiceOptions{MaxTTL: cfg.MaxTTL, Reconcile: cfg.ObserveReconcile, Metrics: metrics, Log: log,
		MaxHoldersPerName: cfg.Limits.HoldersPerName, RefuseHolders: limiter.RefuseHolders})
	coordinatorv1.RegisterCoordinatorServer(grpcServer, svc)
	healthServer := health.NewServer()
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	reflection.Register(grpcServer)
	grpcMetrics.init(grpcServer)

	s := &Server{
		cfg:      cfg,
		log:      log,
		store:    st,
		tracing:  tr,
		service:  svc,
		grpc:     grpcServer,
		health:   healthServer,
		registry: registry,
		access:   authz,
		accessReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordinator_access_file_reloads_total",
			Help: "Times the access file was re-read (SIGHUP), by outcome: ok, or refused (the previous rules stay).",
		}, []string{"outcome"}),
		storeUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coordinator_store_up",
			Help: "1 while the store answers the health pings, 0 once it has failed them for a few seconds.",
		}),
	}
	s.watchCtx, s.stopWatch = context.WithCancel(context.Background())
	s.serving = make(chan struct{})
	s.startWatch()
	s.accessReloads.WithLabelValues("ok")
	s.accessReloads.WithLabelValues("refused")
	s.storeUp.Set(1)
	registry.MustRegister(s.accessReloads, s.storeUp)
	return s, nil
}

// callLogLevel logs routine outcomes at debug so a busy coordinator's log
// shows only what needs a look.
func callLogLevel(code codes.Code) logging.Level {
	switch code {
	// ResourceExhausted is a cap doing its job (the limiter logs a summary,
	// not one line per refused call) or a slow observer told to resume.
	case codes.OK, codes.Canceled, codes.NotFound, codes.FailedPrecondition, codes.InvalidArgument, codes.DeadlineExceeded, codes.ResourceExhausted:
		return logging.LevelDebug
	case codes.Unavailable, codes.Unauthenticated, codes.PermissionDenied:
		return logging.LevelWarn
	default:
		return logging.LevelError
	}
}

func openStore(ctx context.Context, cfg Config, log *slog.Logger, metrics *server.Metrics, registry prometheus.Registerer) (store.Store, error) {
	switch cfg.Store {
	case StoreMemory:
		st, err := memstore.Open(cfg.StateDir, memstore.WithLockDelay(cfg.LockDelay), memstore.WithIdleNameTTL(cfg.IdleNameTTL))
		if err != nil {
			return nil, fmt.Errorf("open memory store: %w", err)
		}
		if cfg.StateDir == "" {
			log.Warn("using the memory store without a state directory: a restart forgets every lease and may grant a name whose old lease still lives")
		} else {
			log.Info("using the memory store: leases live in this process; its state directory keeps it from granting a lease that may still live after a crash", "state_dir", cfg.StateDir)
		}
		if end := st.QuarantineEnd(); !end.IsZero() {
			metrics.DataLoss()
			log.Warn("memory store restarted after a crash: refusing grants until leases granted before may have ended", "until", end)
		}
		registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "coordinator_state_writes_total",
			Help: "Writes of the memory store's state file (one fsync each); at most about one a second, whatever the load.",
		}, func() float64 { return float64(st.Syncs()) }))
		return st, nil
	case StoreRedis:
		st, err := redisstore.NewFromURL(ctx, cfg.RedisURL, redisstore.Options{
			KeyPrefix:      cfg.RedisKeyPrefix,
			Quarantine:     cfg.DataLossQuarantine,
			LockDelay:      cfg.LockDelay,
			IdleNameTTL:    cfg.IdleNameTTL,
			CallTimeout:    cfg.StoreTimeout,
			NewStore:       cfg.RedisNewStore,
			MinReplicas:    cfg.RedisMinReplicas,
			ReplicaTimeout: cfg.RedisReplicaTimeout,
			OnDataLoss: func(quarantine time.Duration) {
				metrics.DataLoss()
				log.Error("Redis lost its data: refusing grants so that holders of lost leases see them expire first",
					"quarantine", quarantine)
			},
			Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("open redis store: %w", err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("unknown store %q", cfg.Store)
}

func serverCredentials(files app.TLSFiles) (credentials.TransportCredentials, error) {
	cfg, err := app.ServerTLS(files)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return insecure.NewCredentials(), nil
	}
	return credentials.NewTLS(cfg), nil
}

// needsAuth exempts health checks, which load balancers and probes make
// without credentials, from authentication and from the stream caps.
func needsAuth(service string) bool {
	return service != healthpb.Health_ServiceDesc.ServiceName
}

// isCoordinator selects the lease service's own calls: the ones that name a
// lease or election.
func isCoordinator(service string) bool {
	return service == coordinatorv1.Coordinator_ServiceDesc.ServiceName
}

func needsAuthCall(_ context.Context, call interceptors.CallMeta) bool {
	return needsAuth(call.Service)
}

func isCoordinatorCall(_ context.Context, call interceptors.CallMeta) bool {
	return isCoordinator(call.Service)
}

// ReloadAccess reads the access file again, as SIGHUP does. A bad file is
// refused and logged with its line; the rules in force stay.
func (s *Server) ReloadAccess() error {
	if s.access == nil || s.cfg.AccessFile == "" {
		s.log.Info("no access file to re-read")
		return nil
	}
	if err := s.access.Reload(); err != nil {
		s.accessReloads.WithLabelValues("refused").Inc()
		s.log.Error("access file refused; the previous rules stay in force", "err", err)
		return err
	}
	s.accessReloads.WithLabelValues("ok").Inc()
	s.log.Info("access file re-read", "file", s.cfg.AccessFile, "credentials", s.access.Rules().Len())
	return nil
}

// Serve serves gRPC on lis until Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	s.setServing(healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	s.servingOnce.Do(func() { close(s.serving) })
	s.log.Info("coordinator serving", "addr", lis.Addr().String(), "store", s.cfg.Store, "tls", s.cfg.TLS.Cert != "",
		"access_file", s.cfg.AccessFile != "", "auth_token", s.cfg.AuthToken != "")
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve gRPC: %w", err)
	}
	return nil
}

// MetricsHandler serves the Prometheus metrics.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry})
}

// Shutdown reports NOT_SERVING, ends waiting calls, lets calls in flight
// finish until ctx ends, then closes the store.
func (s *Server) Shutdown(ctx context.Context) {
	s.health.Shutdown()
	s.stopWatch()
	s.watching.Wait()
	s.service.Stop()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("calls still in flight at the shutdown timeout; closing them")
		s.grpc.Stop()
		<-done
	}
	if err := s.store.Close(); err != nil {
		s.log.Warn("closing the store", "err", err)
	}
	s.tracing.shutdown(ctx, s.log)
}

// Run serves on the configured addresses until ctx ends, then shuts down
// gracefully.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	app.PaceGC(app.GCHeadroom)
	stopProfile, err := app.StartCPUProfile(cfg.CPUProfile, log)
	if err != nil {
		return err
	}
	defer stopProfile()
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		s.Shutdown(ctx)
		return fmt.Errorf("listen: %w", err)
	}
	// stopped delivers the error of whichever server stops serving early.
	stopped := make(chan error, 3)
	var metricsServer *app.MetricsServer
	if cfg.MetricsListen != "" {
		if metricsServer, err = app.ServeMetrics(cfg.MetricsListen, s.registry, log); err != nil {
			_ = lis.Close()
			s.Shutdown(ctx)
			return err
		}
		go func() {
			// Done delivers once: nil after Shutdown, or the error that
			// stopped it early.
			if err := <-metricsServer.Done(); err != nil {
				stopped <- fmt.Errorf("serve metrics: %w", err)
			}
		}()
	}
	var healthServer *grpc.Server
	if cfg.HealthListen != "" {
		if healthServer, err = s.serveHealth(cfg.HealthListen, stopped); err != nil {
			_ = lis.Close()
			if metricsServer != nil {
				_ = metricsServer.Shutdown(ctx)
			}
			s.Shutdown(ctx)
			return err
		}
	}
	// SIGHUP re-reads the access file. It is caught from here on, so the
	// signal no longer kills the process once it serves.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		if err := s.Serve(lis); err != nil {
			stopped <- err
		}
	}()

	err = s.runUntilStopped(ctx, stopped, hup)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if metricsServer != nil {
		_ = metricsServer.Shutdown(shutdownCtx)
	}
	s.Shutdown(shutdownCtx)
	if healthServer != nil {
		// Probes saw NOT_SERVING during the graceful shutdown; now stop.
		healthServer.Stop()
	}
	return err
}

// serveHealth serves the health service alone, in plaintext, on addr: the
// port Kubernetes' gRPC probes can reach when the main port requires TLS or
// client certificates, which those probes do not speak.
func (s *Server) serveHealth(addr string, stopped chan<- error) (*grpc.Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listen: %w", err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(4<<10), grpc.MaxConcurrentStreams(64))
	healthpb.RegisterHealthServer(srv, s.health)
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			stopped <- fmt.Errorf("serve health: %w", err)
		}
	}()
	s.log.Info("health serving (plaintext, health checks only)", "addr", lis.Addr().String())
	return srv, nil
}

// runUntilStopped serves SIGHUPs until ctx ends or a server fails.
func (s *Server) runUntilStopped(ctx context.Context, stopped <-chan error, hup <-chan os.Signal) error {
	for {
		select {
		case <-hup:
			_ = s.ReloadAccess() // logged; the previous rules stay
		case <-ctx.Done():
			s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
			return nil
		case err := <-stopped:
			s.log.Error("stopping after an error", "err", err)
			return err
		}
	}
}
