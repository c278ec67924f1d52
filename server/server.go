package server

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/store"
	memstore "github.com/coordinator-dev/coordinator/server/store/memory"
	redisstore "github.com/coordinator-dev/coordinator/server/store/redis"
)

// Server is a whole coordinator: the gRPC service with health, reflection
// and interceptors, its store, and the metrics endpoint.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	service  *Service
	grpc     *grpc.Server
	health   *health.Server
	registry *prometheus.Registry
}

// New opens the configured store and builds the server. Serve starts it.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(registry)

	// The store is opened before the service exists; its "notifications were
	// missed" signal reaches the service once there is one.
	var service atomic.Pointer[Service]
	eventsLost := func() {
		if s := service.Load(); s != nil {
			s.wake.notifyAll()
		}
	}
	st, err := openStore(ctx, cfg, log, metrics, eventsLost)
	if err != nil {
		return nil, err
	}
	creds, err := serverCredentials(cfg)
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
	auth := tokenAuth(cfg.AuthToken)
	grpcServer := grpc.NewServer(
		grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(
			grpcMetrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(callLog, logOpts...),
			auth.unary,
			recovery.UnaryServerInterceptor(panicked),
		),
		grpc.ChainStreamInterceptor(
			grpcMetrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(callLog, logOpts...),
			auth.stream,
			recovery.StreamServerInterceptor(panicked),
		),
		// Clients that keep streams open for long (KeepAlive, Observe) ping;
		// allow it, and notice dead peers.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	svc := NewService(st, ServiceOptions{MaxTTL: cfg.MaxTTL, Reconcile: cfg.ObserveReconcile, Metrics: metrics, Log: log})
	service.Store(svc)
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

func openStore(ctx context.Context, cfg Config, log *slog.Logger, metrics *Metrics, eventsLost func()) (store.Store, error) {
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
			OnEventsLost: eventsLost,
			Logger:       log,
		})
		if err != nil {
			return nil, fmt.Errorf("open redis store: %w", err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("unknown store %q", cfg.Store)
}

func serverCredentials(cfg Config) (credentials.TransportCredentials, error) {
	if cfg.TLSCert == "" {
		return insecure.NewCredentials(), nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("load TLS key pair: %w", err)
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("read client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", cfg.TLSClientCA)
		}
		tlsCfg.ClientCAs, tlsCfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(tlsCfg), nil
}

// tokenAuth checks a bearer token on every call but health checks, which
// load balancers and probes make without one.
type tokenAuth string

func (want tokenAuth) check(ctx context.Context, method string) error {
	if want == "" || strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		got, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "missing or wrong 'authorization: Bearer …' token")
}

func (want tokenAuth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := want.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (want tokenAuth) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := want.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// Serve serves gRPC on lis until Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(coordinatorv1.Coordinator_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.log.Info("coordinator serving", "addr", lis.Addr().String(), "store", s.cfg.Store, "tls", s.cfg.TLSCert != "")
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
	errc := make(chan error, 2)
	go func() { errc <- s.Serve(lis) }()

	var metricsServer *http.Server
	if cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.MetricsHandler())
		metricsServer = &http.Server{Addr: cfg.MetricsListen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := metricsServer.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve metrics: %w", err)
			}
		}()
		log.Info("metrics serving", "addr", cfg.MetricsListen, "path", "/metrics")
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
		err = nil
	case err = <-errc:
		log.Error("stopping after an error", "err", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if metricsServer != nil {
		_ = metricsServer.Shutdown(shutdownCtx)
	}
	s.Shutdown(shutdownCtx)
	return err
}
