package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/store"
	redisstore "github.com/coordinator-dev/coordinator/server/store/redis"
)

const benchTTL = 30 * time.Second

// leaseSuite measures uncontended acquire+release cycles (each worker its
// own name) through the coordinator with each store, and through the Redis
// store's scripts called directly: the floor Redis sets.
func leaseSuite(env benchEnv, levels []int) error {
	ctx := context.Background()
	// The floor: the store's scripts sent one call at a time, as a plain
	// go-redis client would, with no coordinator in between.
	direct, err := redisstore.NewFromURL(ctx, env.redisURL, redisstore.Options{
		KeyPrefix: fmt.Sprintf("bench-direct-%d", time.Now().UnixNano()), NoPipelining: true,
	})
	if err != nil {
		return err
	}
	defer func() { _ = direct.Close() }() // the benchmark is over; nothing to report
	viaRedis, err := env.startCoordinator("redis")
	if err != nil {
		return err
	}
	defer viaRedis.stop()
	viaMemory, err := env.startCoordinator("memory")
	if err != nil {
		return err
	}
	defer viaMemory.stop()
	stateDir, err := os.MkdirTemp("", "bench-state-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(stateDir) }()
	viaDurable, err := env.startCoordinatorWith("memory", stateDir)
	if err != nil {
		return err
	}
	defer viaDurable.stop()

	fmt.Printf("acquire+release cycles, uncontended, %s per measurement (2 cores shared by client, coordinator and Redis)\n", env.duration)
	fmt.Printf("%-5s %-28s %s\n", "conc", "path", "cycles")
	for _, n := range levels {
		b := closedLoop(ctx, n, env.duration, directCycle(direct))
		a := closedLoop(ctx, n, env.duration, grpcCycle(viaRedis.client))
		c := closedLoop(ctx, n, env.duration, grpcCycle(viaMemory.client))
		writes := viaDurable.stateWrites()
		d := closedLoop(ctx, n, env.duration, grpcCycle(viaDurable.client))
		writes = viaDurable.stateWrites() - writes
		fmt.Printf("%-5d %-28s %s\n", n, "(a) gRPC + Redis store", a)
		fmt.Printf("%-5d %-28s %s\n", n, "(b) Redis scripts direct", b)
		fmt.Printf("%-5d %-28s %s\n", n, "(c) gRPC + memory store", c)
		fmt.Printf("%-5d %-28s %s; %.1f state writes (fsyncs)/s\n", n, "(d) (c) with a state dir", d, writes/d.elapsed.Seconds())
		fmt.Printf("%-5d %-28s %.2f\n", n, "a/b", a.perSecond()/b.perSecond())
		fmt.Printf("%-5d %-28s %.2f\n\n", n, "d/c", d.perSecond()/c.perSecond())
	}
	return nil
}

func directCycle(st store.Store) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, i int) error {
		name, holder := fmt.Sprintf("bench/%d", worker), fmt.Sprintf("w%d", worker)
		res, err := st.Acquire(ctx, store.AcquireRequest{Name: name, Holder: holder, TTL: benchTTL})
		if err != nil {
			return err
		}
		if !res.Acquired {
			return errors.New("not acquired")
		}
		_, err = st.Release(ctx, name, holder, res.Lease.Token)
		return err
	}
}

func grpcCycle(client coordinatorv1.CoordinatorClient) func(ctx context.Context, worker, i int) error {
	ttl := durationpb.New(benchTTL)
	return func(ctx context.Context, worker, i int) error {
		name, holder := fmt.Sprintf("bench/%d", worker), fmt.Sprintf("w%d", worker)
		resp, err := client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: ttl})
		if err != nil {
			return err
		}
		if !resp.GetAcquired() {
			return errors.New("not acquired")
		}
		_, err = client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: resp.GetLease().GetToken()})
		return err
	}
}
