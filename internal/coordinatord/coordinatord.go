package coordinatord

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
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
	"github.com/coordinator-dev/coordinator/server/store"
	memstore "github.com/coordinator-dev/coordinator/server/store/memory"
	redisstore "github.com/coordinator-dev/coordinator/server/store/redis"
)

// Server is a whole coordinator: the gRPC service with health, reflection
// and interceptors, its store, and its metrics registry.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	service  *server.Service
	grpc     *grpc.Server
	health   *health.Server
	registry *prometheus.Registry
}

// New opens the configured store and builds the server. Serve starts it.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	registry := app.NewRegistry()
	metrics := server.NewMetrics(registry)
	st, err := openStore(ctx, cfg, log, metrics)
	if err != nil {
		return nil, err
	}
	creds, err := serverCredentials(cfg.TLS)
	if err != nil {
		_ = st.Close()
		return nil, err
	}

	grpcMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	registry.MustRegister(grpcMetrics)
	callLog := logging.LoggerFunc(func(ctx context.Context, level logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(level), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(callLogLevel),
	}
	panicked := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in a call", "panic", p)
		return status.Error(codes.Internal, "internal error")
	})
	authenticate := bearerAuth(cfg.AuthToken)
	grpcServer := grpc.NewServer(
		grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(
			grpcMetrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(callLog, logOpts...),
			selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(authenticate), selector.MatchFunc(needsAuth)),
			recovery.UnaryServerInterceptor(panicked),
		),
		grpc.ChainStreamInterceptor(
			grpcMetrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(callLog, logOpts...),
			selector.StreamServerInterceptor(auth.StreamServerInterceptor(authenticate), selector.MatchFunc(needsAuth)),
			recovery.StreamServerInterceptor(panicked),
		),
		// Clients that keep streams open for long (KeepAlive, Observe) ping;
		// allow it, and notice dead peers.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	svc := server.NewService(st, server.ServiceOptions{MaxTTL: cfg.MaxTTL, Reconcile: cfg.ObserveReconcile, Metrics: metrics, Log: log})
	coordinatorv1.RegisterCoordinatorServer(grpcServer, svc)
	healthServer := health.NewServer()
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	reflection.Register(grpcServer)
	grpcMetrics.InitializeMetrics(grpcServer)

	return &Server{
		cfg:      cfg,
		log:      log,
		store:    st,
		service:  svc,
		grpc:     grpcServer,
		health:   healthServer,
		registry: registry,
	}, nil
}

// callLogLevel logs routine outcomes at debug so a busy coordinator's log
// shows only what needs a look.
func callLogLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.Canceled, codes.NotFound, codes.FailedPrecondition, codes.InvalidArgument, codes.DeadlineExceeded:
		return logging.LevelDebug
	case codes.Unavailable, codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted:
		return logging.LevelWarn
	default:
		return logging.LevelError
	}
}

func openStore(ctx context.Context, cfg Config, log *slog.Logger, metrics *server.Metrics) (store.Store, error) {
	switch cfg.Store {
	case StoreMemory:
		log.Info("using the memory store: leases live in this process and are forgotten when it restarts")
		return memstore.New(memstore.WithLockDelay(cfg.LockDelay)), nil
	case StoreRedis:
		st, err := redisstore.NewFromURL(ctx, cfg.RedisURL, redisstore.Options{
			KeyPrefix:  cfg.RedisKeyPrefix,
			Quarantine: cfg.DataLossQuarantine,
			LockDelay:  cfg.LockDelay,
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
// without credentials.
func needsAuth(_ context.Context, call interceptors.CallMeta) bool {
	return call.Service != healthpb.Health_ServiceDesc.ServiceName
}

// bearerAuth checks the 'authorization: Bearer …' token of a call against
// want; an empty want lets every call through.
func bearerAuth(want string) auth.AuthFunc {
	return func(ctx context.Context) (context.Context, error) {
		if want == "" {
			return ctx, nil
		}
		got, err := auth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, "missing 'authorization: Bearer …' token")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			return nil, status.Error(codes.Unauthenticated, "wrong bearer token")
		}
		return ctx, nil
	}
}

// Serve serves gRPC on lis until Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.Coordinator_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.log.Info("coordinator serving", "addr", lis.Addr().String(), "store", s.cfg.Store, "tls", s.cfg.TLS.Cert != "")
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
}

// Run serves on the configured addresses until ctx ends, then shuts down
// gracefully.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		s.Shutdown(ctx)
		return fmt.Errorf("listen: %w", err)
	}
	var metricsServer *app.MetricsServer
	var metricsFailed <-chan error
	if cfg.MetricsListen != "" {
		if metricsServer, err = app.ServeMetrics(cfg.MetricsListen, s.registry, log); err != nil {
			_ = lis.Close()
			s.Shutdown(ctx)
			return err
		}
		metricsFailed = metricsServer.Done()
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()

	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
		err = nil
	case err = <-served:
		log.Error("stopping after an error", "err", err)
	case err = <-metricsFailed:
		err = fmt.Errorf("serve metrics: %w", err)
		log.Error("stopping after an error", "err", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if metricsServer != nil {
		_ = metricsServer.Shutdown(shutdownCtx)
	}
	s.Shutdown(shutdownCtx)
	return err
}
