package coordinatord_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/coordinatord"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// eventLog is what one observer received.
type eventLog struct {
	mu     sync.Mutex
	events []*coordinatorv1.LeaderEvent
	err    error
}

func (l *eventLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// String renders the events as KIND(candidate,value,term) for messages and
// comparisons.
func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, ev := range l.events {
		kind := strings.TrimPrefix(ev.GetKind().String(), "KIND_")
		if ev.GetLeader() == nil {
			fmt.Fprintf(&b, "%s ", kind)
			continue
		}
		fmt.Fprintf(&b, "%s(%s,%s,%d) ", kind, ev.GetLeader().GetCandidate(), ev.GetLeader().GetValue(), ev.GetLeader().GetTerm())
	}
	return strings.TrimSpace(b.String())
}

// observeInto records the events of election on a stream that ends with the
// test.
func observeInto(t *testing.T, c *coordinator, election string) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: election})
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := stream.Recv()
			l.mu.Lock()
			if err != nil {
				l.err = err
				l.mu.Unlock()
				return
			}
			l.events = append(l.events, ev.GetEvent())
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// TestObserversOfManyElectionsSeeEveryChangeInOrder observes many elections
// at once, so that their reads share store calls, and takes each through
// every kind of change: elected, proclaimed, resigned, elected again, and a
// term that ends by expiry. Every observer sees each change, in order, VACANT
// included. On Redis the changes go through a second coordinator, so that
// only announcements through Redis can tell the observers' one.
func TestObserversOfManyElectionsSeeEveryChangeInOrder(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const (
				elections = 40
				perElect  = 2
				// Long enough that the election is read before the term ends,
				// however loaded the machine.
				shortTerm = 2 * time.Second
			)
			cfg := testConfig(t, kind)
			watcher := start(t, cfg)
			writer := watcher
			if kind == coordinatord.StoreRedis {
				writer = start(t, cfg)
			}
			logs := make([][]*eventLog, elections)
			for e := range elections {
				for range perElect {
					logs[e] = append(logs[e], observeInto(t, watcher, fmt.Sprintf("many/%d", e)))
				}
			}
			seen := func(n int, what string) {
				t.Helper()
				testwait.Until(t, 20*time.Second, what, func() bool {
					for e := range elections {
						for _, l := range logs[e] {
							if l.len() < n {
								return false
							}
						}
					}
					return true
				})
			}
			seen(1, "every observer got the current state")
			campaign := func(e int, candidate, value string, ttl time.Duration) uint64 {
				resp, err := writer.client.Campaign(servertest.Timeout(t, 10*time.Second), &coordinatorv1.CampaignRequest{
					Election: fmt.Sprintf("many/%d", e), Candidate: candidate, Value: []byte(value), Ttl: servertest.Dur(ttl),
				})
				if err != nil || !resp.GetElected() {
					t.Fatalf("campaign of %s in many/%d: %v, %v", candidate, e, resp, err)
				}
				return resp.GetLeader().GetTerm()
			}
			first, second := make([]uint64, elections), make([]uint64, elections)
			for e := range elections {
				first[e] = campaign(e, "a", "a1", time.Minute)
			}
			seen(2, "every observer saw a elected")
			for e := range elections {
				campaign(e, "a", "a2", time.Minute)
			}
			seen(3, "every observer saw a proclaim")
			for e := range elections {
				if _, err := writer.client.Resign(servertest.Timeout(t, 10*time.Second), &coordinatorv1.ResignRequest{Election: fmt.Sprintf("many/%d", e), Candidate: "a", Term: first[e]}); err != nil {
					t.Fatal(err)
				}
			}
			seen(4, "every observer saw a resign")
			for e := range elections {
				second[e] = campaign(e, "b", "b1", shortTerm)
			}
			seen(5, "every observer saw b elected")
			seen(6, "every observer saw b's term expire")

			for e := range elections {
				want := fmt.Sprintf("VACANT ELECTED(a,a1,%d) PROCLAIMED(a,a2,%d) VACANT ELECTED(b,b1,%d) VACANT", first[e], first[e], second[e])
				for _, l := range logs[e] {
					if got := l.String(); got != want {
						t.Fatalf("an observer of many/%d saw\n  %s\nwant\n  %s", e, got, want)
					}
				}
			}
		})
	}
}

// TestReconcileCatchesAChangeThatWasNeverAnnounced loses the Redis mark that
// asks for an observed election's changes to be announced, as data loss
// would, then elects a leader through another coordinator: nothing is
// announced, and the observers learn of it from the periodic re-read.
func TestReconcileCatchesAChangeThatWasNeverAnnounced(t *testing.T) {
	cfg := testConfig(t, coordinatord.StoreRedis)
	cfg.ObserveReconcile = time.Second
	watcher, writer := start(t, cfg), start(t, cfg)
	l := observeInto(t, watcher, "quiet")
	testwait.Until(t, 10*time.Second, "the current state observed", func() bool { return l.len() == 1 })

	rdb := redistest.Client(t)
	// The mark is the lease key's 'watched' field.
	key := cfg.RedisKeyPrefix + ":{quiet}:lease"
	if n, err := rdb.HDel(context.Background(), key, "watched").Result(); err != nil || n != 1 {
		t.Fatalf("HDEL %s watched = %d, %v; want the mark deleted", key, n, err)
	}
	resp, err := writer.client.Campaign(servertest.Timeout(t, 10*time.Second), &coordinatorv1.CampaignRequest{Election: "quiet", Candidate: "c", Ttl: servertest.Dur(time.Minute)})
	if err != nil || !resp.GetElected() {
		t.Fatalf("Campaign = %v, %v", resp, err)
	}
	// The re-read comes within one and a half intervals, and a bit.
	testwait.Until(t, 15*time.Second, "the unannounced leader observed", func() bool { return l.len() == 2 })
	if got, want := l.String(), fmt.Sprintf("VACANT ELECTED(c,,%d)", resp.GetLeader().GetTerm()); got != want {
		t.Fatalf("the observer saw %s, want %s", got, want)
	}
}
