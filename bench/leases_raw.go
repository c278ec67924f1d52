package main

// The leases suite's cycles without the SDK: raw gRPC, the Redis store in
// this process, the gRPC echo.

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/store"
)

// grpcCycle is the generated gRPC client, unary TryAcquire and Release.
func grpcCycle(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		granted, token, err := grpcAcquire(ctx, c, names[worker], holderName(worker))
		if err != nil {
			return err
		}
		if !granted {
			return errNotAcquired
		}
		return grpcRelease(ctx, c, names[worker], holderName(worker), token)
	}
}

// grpcTry is one contended attempt: TryAcquire without a wait, and Release
// when granted.
func grpcTry(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		granted, token, err := grpcAcquire(ctx, c, names[worker], holderName(worker))
		if err != nil || !granted {
			return false, err
		}
		return true, grpcRelease(ctx, c, names[worker], holderName(worker), token)
	}
}

// semaphoreCycle is grpcCycle on names of semaphoreCapacity: a share of
// weight 1, then its release.
func semaphoreCycle(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		name, holder := names[worker], holderName(worker)
		resp, err := c.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: benchTTLpb, Capacity: semaphoreCapacity})
		if err != nil {
			return err
		}
		if !resp.GetAcquired() {
			return errNotAcquired
		}
		return grpcRelease(ctx, c, name, holder, resp.GetLease().GetToken())
	}
}

// semaphoreTry is one contended attempt of semaphoreCycle: refused is not
// an error.
func semaphoreTry(c coordinatorv1.CoordinatorClient, names []string) func(ctx context.Context, worker int) (bool, error) {
	cycle := semaphoreCycle(c, names)
	return func(ctx context.Context, worker int) (bool, error) {
		switch err := cycle(ctx, worker, 0); {
		case errors.Is(err, errNotAcquired):
			return false, nil
		case err != nil:
			return false, err
		}
		return true, nil
	}
}

func grpcAcquire(ctx context.Context, c coordinatorv1.CoordinatorClient, name, holder string) (bool, uint64, error) {
	resp, err := c.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: benchTTLpb})
	if err != nil {
		return false, 0, err
	}
	return resp.GetAcquired(), resp.GetLease().GetToken(), nil
}

func grpcRelease(ctx context.Context, c coordinatorv1.CoordinatorClient, name, holder string, token uint64) error {
	_, err := c.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token})
	return err
}

// directCycle calls the Redis store's Acquire and Release in this process:
// the coordinator's scripts on the same Redis, with no gRPC and no
// coordinator in between (one call at a time per worker, no pipelining).
func directCycle(st store.Store, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		name, holder := names[worker], holderName(worker)
		res, err := st.Acquire(ctx, store.AcquireRequest{Name: name, Holder: holder, TTL: benchTTL})
		if err != nil {
			return err
		}
		if !res.Acquired {
			return errNotAcquired
		}
		_, err = st.Release(ctx, name, holder, res.Lease.Token)
		return err
	}
}

// echoCall is one health Check on the echo child.
func echoCall(conn *grpc.ClientConn) func(ctx context.Context, worker, i int) error {
	health := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{}
	return func(ctx context.Context, _, _ int) error {
		_, err := health.Check(ctx, req)
		return err
	}
}
