package client_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/coordinatord"
)

func ExampleClient_TryLock() {
	addr, stop := startCoordinator() // a coordinator for the example
	defer stop()
	ctx := context.Background()

	// WithTTL: the TTL of the Client's default session, which its leases
	// are held in: renewed about every 3s, gone 10s after this process
	// stops.
	c, err := client.New(addr, client.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	lease, err := c.TryLock(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lease.Name())

	// Any other attempt, through this Client or another, finds it held.
	_, err = c.TryLock(ctx, "reports/nightly")
	var notAcquired *client.NotAcquiredError
	fmt.Println("again:", errors.Is(err, client.ErrNotAcquired), errors.As(err, &notAcquired) && notAcquired.Holder == lease.Holder())

	released, err := lease.Release(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", released, lease.Err())
	// A second Release is a no-op.
	released, err = lease.Release(ctx)
	fmt.Println("again:", released, err)
	// Output:
	// holding reports/nightly
	// again: true true
	// released: true coordinator: released
	// again: false <nil>
}

func ExampleClient_NewSession() {
	addr, stop := startCoordinator()
	defer stop()
	ctx := context.Background()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	// One session, renewed about every 5s, keeps all of this worker's
	// partitions; if the worker dies they all go at once after 15s.
	session, err := c.NewSession(ctx, client.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	var parts []*client.Lease
	for i := range 3 {
		part, err := c.TryLock(ctx, fmt.Sprintf("partitions/%d", i), client.WithSession(session))
		if err != nil {
			log.Fatal(err)
		}
		parts = append(parts, part)
	}
	fmt.Println("holding", len(parts), "partitions in one session")

	// Closing the session releases them all in one call.
	if err := session.Close(ctx); err != nil {
		log.Fatal(err)
	}
	<-parts[2].Done()
	fmt.Println(parts[2].Err())
	// Output:
	// holding 3 partitions in one session
	// coordinator: released
}

func ExampleClient_Session() {
	addr, stop := startCoordinator()
	defer stop()
	ctx := context.Background()

	c, err := client.New(addr, client.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }() // closes the default session: one call releases its locks

	// Without WithSession, locks and leaderships join the
	// Client's default session, made by the first of them: one renewal
	// keeps them all, and they end together.
	queue, err := c.Lock(ctx, "queues/orders")
	if err != nil {
		log.Fatal(err)
	}
	leader, err := c.Campaign(ctx, "schedulers", []byte("10.0.0.7:8080"))
	if err != nil {
		log.Fatal(err)
	}
	session, err := c.Session(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("one session:", queue.SessionID() == session.ID() && leader.SessionID() == session.ID(), session.TTL())

	// Releasing one of them is a release of that lease alone.
	if _, err := queue.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("session alive:", session.Err() == nil, "leading:", leader.Err() == nil)

	// When the session is lost or closed, every lease in it ends.
	if err := session.Close(ctx); err != nil {
		log.Fatal(err)
	}
	<-leader.Done()
	fmt.Println(leader.Err())
	// Output:
	// one session: true 15s
	// session alive: true leading: true
	// coordinator: released
}

func ExampleSemaphore() {
	addr, stop := startCoordinator()
	defer stop()
	ctx := context.Background()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	// At most 5 migrations at once, across every process that uses the name
	// with the same capacity. Each share is a lease of its own.
	sem := c.Semaphore("db/migrations", 5)
	big, err := sem.Acquire(ctx, 3) // waits in arrival order when full
	if err != nil {
		log.Fatal(err)
	}
	small, err := sem.TryAcquire(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", big.Weight()+small.Weight(), "tokens increase:", small.Token() > big.Token())
	_, err = sem.TryAcquire(ctx, 1)
	fmt.Println("full:", errors.Is(err, client.ErrNotAcquired))
	_, _ = small.Release(ctx)
	_, _ = big.Release(ctx)
	// Output:
	// held: 5 tokens increase: true
	// full: true
}

func ExampleRWMutex() {
	addr, stop := startCoordinator()
	defer stop()
	ctx := context.Background()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	rw := c.RWMutex("config/routes")
	reader, err := rw.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = rw.TryLock(ctx)
	fmt.Println("writer refused beside a reader:", errors.Is(err, client.ErrNotAcquired))
	_, _ = reader.Release(ctx)

	writer, err := rw.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// A resource refuses tokens below the last writer's.
	fmt.Println("writer's token above the reader's:", writer.Token() > reader.Token())
	_, _ = writer.Release(ctx)
	// Output:
	// writer refused beside a reader: true
	// writer's token above the reader's: true
}

func ExampleClient_Lock() {
	addr, stop := startCoordinator()
	defer stop()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	// Wait at most a minute for the lock, in arrival order.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := c.Lock(ctx, "accounts/42")
	if errors.Is(err, client.ErrNotAcquired) {
		fmt.Println("busy:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = lease.Release(context.Background()) }()

	// Work under the lock with a context that is cancelled if it is lost,
	// and hand the fencing token to what the work writes.
	work := func(ctx context.Context, token uint64) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		default:
			return nil // write with token
		}
	}
	if err := work(lease.Context(ctx), lease.Token()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("updated under", lease.Name())
	// Output:
	// updated under accounts/42
}

func ExampleClient_LockAll() {
	addr, stop := startCoordinator()
	defer stop()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	// A transfer holds both accounts or neither, whatever order other
	// transfers list them in: groups never deadlock.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	accounts, err := c.LockAll(ctx, []string{"accounts/7", "accounts/42"})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = accounts.Release(context.Background()) }()

	// Each account gets its own fencing token, to write it with.
	for _, l := range accounts.Leases() {
		fmt.Println(l.Name, "fenced:", l.Token == accounts.Token(l.Name) && l.Token > 0)
	}
	// Nobody else gets either of them meanwhile, alone or in a group.
	_, err = c.TryLockAll(ctx, []string{"accounts/42", "accounts/99"})
	var notAcquired *client.NotAcquiredError
	fmt.Println("in the way:", errors.As(err, &notAcquired) && notAcquired.Name == "accounts/42")
	// Output:
	// accounts/7 fenced: true
	// accounts/42 fenced: true
	// in the way: true
}

func ExampleClient_Campaign() {
	addr, stop := startCoordinator()
	defer stop()
	ctx := context.Background()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	// Wait until elected; the leadership then renews itself.
	leadership, err := c.Campaign(ctx, "scheduler", []byte("10.0.0.1:8080"))
	if err != nil {
		log.Fatal(err)
	}
	leader, err := c.Leader(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader %s, term is mine: %v\n", leader.Value, leader.Term == leadership.Term())

	if _, err := leadership.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = c.Leader(ctx, "scheduler")
	fmt.Println(errors.Is(err, client.ErrNoLeader))
	// Output:
	// leader 10.0.0.1:8080, term is mine: true
	// true
}

func ExampleClient_RunAsLeader() {
	addr, stop := startCoordinator()
	defer stop()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Campaign, run the function while leader, resign when it returns, and
	// campaign again, until ctx ends.
	err = c.RunAsLeader(ctx, "compactor", []byte("host-a"), func(ctx context.Context) error {
		fmt.Println("leading")
		// Work until ctx is cancelled: the leadership was lost, or the
		// caller is done. Here one round of work, then stop.
		cancel()
		<-ctx.Done()
		return nil
	})
	fmt.Println("stopped:", err)
	// Output:
	// leading
	// stopped: <nil>
}

func ExampleClient_Observe() {
	addr, stop := startCoordinator()
	defer stop()

	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := c.Observe(ctx, "scheduler")
	show := func() {
		switch ev := <-events; ev.Kind {
		case client.Vacant:
			fmt.Println(ev.Kind)
		default:
			fmt.Println(ev.Kind, string(ev.Leader.Value))
		}
	}
	show() // the current state first

	leadership, err := c.Campaign(ctx, "scheduler", []byte("10.0.0.1:8080"))
	if err != nil {
		log.Fatal(err)
	}
	show()
	if err := leadership.Proclaim(ctx, []byte("10.0.0.2:8080")); err != nil {
		log.Fatal(err)
	}
	show()
	if _, err := leadership.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	show()
	// Output:
	// VACANT
	// ELECTED 10.0.0.1:8080
	// PROCLAIMED 10.0.0.2:8080
	// VACANT
}

// startCoordinator runs an in-process coordinator on the memory store, for
// the examples.
func startCoordinator() (addr string, stop func()) {
	cfg, err := coordinatord.ParseConfig(flag.NewFlagSet("example", flag.ContinueOnError), nil, func(string) (string, bool) { return "", false })
	if err != nil {
		log.Fatal(err)
	}
	cfg.StateDir = "" // each example starts afresh
	srv, err := coordinatord.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	return lis.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}
}
