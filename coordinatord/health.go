package coordinatord

import (
	"context"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// The store's reachability drives the health status: the coordinator is of
// no use while its store does not answer, and a load balancer or Kubernetes
// should send calls elsewhere. One failed ping is not enough (a Redis
// failover takes a moment); a few seconds of failures are.
const (
	storePingEvery   = time.Second
	storePingTimeout = time.Second
	notServingAfter  = 3 * time.Second
)

// LivenessService is the health service name that reports SERVING for as
// long as the process serves, whatever the store does: for liveness probes,
// which should restart a stuck coordinator, not every coordinator at once
// because their shared Redis is down.
const LivenessService = "liveness"

// setServing sets the status of the whole server ("") and of the lease
// service, which follow the store: for readiness probes and load balancers.
func (s *Server) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(coordinatorv1.Coordinator_ServiceDesc.ServiceName, st)
}

// startWatch starts the store health loop, which begins pinging once Serve
// has set the health status (s.serving closed) and ends at Shutdown. It runs
// from New, so that a server that exists has all its goroutines: tests that
// check for leaked goroutines see a settled process.
func (s *Server) startWatch() {
	s.watching.Add(1)
	go func() {
		defer s.watching.Done()
		select {
		case <-s.serving:
		case <-s.watchCtx.Done():
			return
		}
		s.watchStore(s.watchCtx)
	}()
}

// watchStore pings the store every second: NOT_SERVING once it has failed
// for notServingAfter, SERVING again at the first answer.
func (s *Server) watchStore(ctx context.Context) {
	timeout := min(storePingTimeout, s.cfg.StoreTimeout)
	serving := true
	var failingSince time.Time
	tick := time.NewTicker(storePingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pingCtx, cancel := context.WithTimeout(ctx, timeout)
		err := s.store.Ping(pingCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			failingSince = time.Time{}
			if !serving {
				serving = true
				s.storeUp.Set(1)
				s.setServing(healthpb.HealthCheckResponse_SERVING)
				s.log.Info("the store answers again: health SERVING")
			}
		case failingSince.IsZero():
			failingSince = time.Now()
			s.log.Warn("the store did not answer a health ping", "err", err)
		case serving && time.Since(failingSince) >= notServingAfter:
			serving = false
			s.storeUp.Set(0)
			s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
			s.log.Error("the store has not answered for a while: health NOT_SERVING", "since", failingSince, "err", err)
		}
	}
}
