package housekeeper_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/housekeeper"
)

// A housekeeper beside Deckard: it works until SIGTERM, then finishes its
// batches in flight and leaves the membership.
func ExampleRunner() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer func() { _ = rdb.Close() }()
	coord, err := client.New("localhost:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = coord.Close() }()
	var hk *housekeeper.Runner
	member, err := housekeeper.NewCoordinatorMembership(coord, housekeeper.MembershipConfig{
		OnLeading: func(leading bool) { hk.SetLeader(leading) }, // the leader reports housekeeper_queue_messages
	})
	if err != nil {
		log.Fatal(err)
	}
	hk, err = housekeeper.New(rdb, member, housekeeper.Config{
		Prefix:     "deckard_v1",
		Registerer: prometheus.DefaultRegisterer,
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = member.Run(ctx) }()
	if err := hk.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A benchmark or a tool can run the batches itself.
func ExampleQueues_UnlockBatch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer func() { _ = rdb.Close() }()
	q, err := housekeeper.NewQueues(rdb, "deckard_v1")
	if err != nil {
		log.Fatal(err)
	}
	const token = 42 // the fencing token of the view in force
	for {
		moved, err := q.UnlockBatch(ctx, "orders", housekeeper.LockAck, token, 1000)
		if err != nil {
			log.Fatal(err) // wraps housekeeper.ErrFenced when a newer view has been there
		}
		if moved < 1000 {
			break
		}
	}
}
