package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPipelinerFailsCallsQueuedAfterClose: a call that reaches the queue
// after close (its send may win over the closed stop) fails with ErrClosed
// instead of waiting for a sender that is gone.
func TestPipelinerFailsCallsQueuedAfterClose(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	defer func() { _ = c.Close() }()
	p := newPipeliner(context.Background(), c, time.Second, replicaWait{})
	p.close()
	p.inFlight.Add(1) // as if another call were on its way: each call below queues
	defer p.inFlight.Add(-1)
	for i := range 64 {
		done := make(chan error, 1)
		go func() {
			cmd, _ := p.run(context.Background(), &scriptCall{script: describeScript, keys: []string{"k"}})
			done <- cmd.Err()
		}()
		select {
		case err := <-done:
			if !errors.Is(err, redis.ErrClosed) {
				t.Fatalf("call %d after close: %v, want ErrClosed", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("call %d after close still waits after 5s", i)
		}
	}
}

// TestPipelinerCallsRacingCloseAllReturn: calls made while the pipeliner
// closes either run or fail; none is left waiting.
func TestPipelinerCallsRacingCloseAllReturn(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	p := newPipeliner(context.Background(), s.client, time.Second, replicaWait{})
	const callers = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			k := s.keys("job" + string(rune('a'+i%26)))
			for range 20 {
				cmd, _ := p.run(context.Background(), &scriptCall{script: describeScript, keys: []string{k.lease, k.queue, k.waiters}})
				err := cmd.Err()
				if err != nil && !errors.Is(err, redis.ErrClosed) {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	time.Sleep(time.Millisecond)
	p.close()
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("calls racing close still wait after 10s")
	}
	close(errs)
	for err := range errs {
		t.Errorf("call racing close: %v, want success or ErrClosed", err)
	}
}
