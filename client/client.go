package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
)

// Client talks to one coordinator. It is safe for concurrent use; make one
// per process and share it. Close it when done: Close closes its sessions,
// which releases every lease and leadership it holds.
type Client struct {
	api      coordinatorv1.CoordinatorClient
	conn     *grpc.ClientConn
	identity string
	ttl      time.Duration
	log      *slog.Logger
	// clock measures session validity and schedules renewals. Retry delays
	// and the coordinator's waits are real time whatever it is.
	clock clockwork.Clock

	closeTimeout time.Duration
	seq          atomic.Uint64

	// closing is cancelled, with ErrClosed, when Close starts.
	closing     context.Context
	cancelClose context.CancelCauseFunc
	closeOnce   sync.Once
	closeErr    error

	// Goroutines of calls that outlive them (Observe), which Close waits
	// for; none is added once goneMu saw Close.
	goneMu sync.Mutex
	gone   bool
	wg     sync.WaitGroup

	// opTracer traces the lease calls made as stream operations; nil
	// without WithTracerProvider.
	opTracer *operationTracer
	// stream carries the lease calls and the renewals of sessions
	// (stream.go); renewals schedules those renewals (renewer.go).
	stream   opStream
	renewals renewer

	// The default session (Session).
	sessionTurn chan struct{} // held (filled) while the default session is made
	// defaultSession is read without the turn, by every acquisition, and
	// written holding it.
	defaultSession atomic.Pointer[Session]
}

// New connects to the coordinator at target (host:port, or any gRPC target
// such as "dns:///coordinator.example:7400"). The connection is made lazily:
// New fails only on bad options, not on an unreachable coordinator.
//
// Without WithTLS or WithTransportCredentials the connection is plaintext,
// and New refuses WithBearerToken (see WithInsecureBearerToken).
func New(target string, opts ...Option) (*Client, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	creds := cfg.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// A lease client must reconnect soon after the coordinator is back:
		// gRPC's default backoff grows to two minutes, longer than any TTL.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Notice a dead coordinator connection (the server allows pings
		// every 5s).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}
	if cfg.token != nil {
		if cfg.token.RequireTransportSecurity() && plaintext(creds) {
			// gRPC would refuse too, in words that do not say what to do.
			return nil, errors.New("coordinator: WithBearerToken does not send the token over a plaintext connection, where anyone on the path can read it: " +
				"connect with WithTLS, or use WithInsecureBearerToken on loopback and in tests")
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(cfg.token))
	}
	if cfg.tracer != nil {
		dialOpts = append(dialOpts, tracingDialOption(cfg.tracer))
	}
	conn, err := grpc.NewClient(target, append(dialOpts, cfg.dialOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("coordinator: connect to %s: %w", target, err)
	}
	return newClient(conn, cfg), nil
}

// plaintext reports whether creds leave the connection unencrypted.
func plaintext(creds credentials.TransportCredentials) bool {
	return creds.Info().SecurityProtocol == "insecure"
}

func newConfig(opts []Option) (config, error) {
	cfg := config{ttl: DefaultTTL, closeTimeout: DefaultCloseTimeout}
	for _, o := range opts {
		o.applyClient(&cfg)
	}
	if cfg.identity == "" {
		cfg.identity = defaultIdentity()
	}
	if err := checkIdentity(cfg.identity); err != nil {
		return cfg, err
	}
	if cfg.ttl <= 0 {
		return cfg, fmt.Errorf("coordinator: TTL %s is not positive", cfg.ttl)
	}
	if cfg.token != nil && cfg.token.token == "" {
		return cfg, errors.New("coordinator: the bearer token is empty")
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	if cfg.clock == nil {
		cfg.clock = clockwork.NewRealClock()
	}
	return cfg, nil
}

func newClient(conn *grpc.ClientConn, cfg config) *Client {
	closing, cancel := context.WithCancelCause(context.Background())
	c := &Client{
		api:          coordinatorv1.NewCoordinatorClient(conn),
		conn:         conn,
		identity:     cfg.identity,
		ttl:          cfg.ttl,
		log:          cfg.log,
		clock:        cfg.clock,
		closeTimeout: cfg.closeTimeout,
		closing:      closing,
		cancelClose:  cancel,
		opTracer:     newOperationTracer(cfg.tracer),
		sessionTurn:  make(chan struct{}, 1),
	}
	c.stream.init(c, cfg.sessionIdle)
	c.renewals.c = c
	return c
}

// defaultIdentity is the host name, the process id and a random suffix.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

func checkIdentity(id string) error {
	switch {
	case len(id) > maxIdentityBytes:
		return fmt.Errorf("coordinator: identity is %d bytes long; at most %d are allowed", len(id), maxIdentityBytes)
	case !utf8.ValidString(id):
		return errors.New("coordinator: identity is not valid UTF-8")
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("coordinator: identity contains the unprintable character %U", r)
		}
	}
	return nil
}

// Identity is the prefix of the holder of every lease and the candidate of
// every campaign this Client makes (see WithIdentity). It is stable for the
// life of the Client.
func (c *Client) Identity() string { return c.identity }

// newHolder returns a holder unique to one acquisition.
func (c *Client) newHolder() string {
	return c.identity + "#" + strconv.FormatUint(c.seq.Add(1), 10)
}

// API returns the raw gRPC client of the coordinator, on the Client's
// connection and with its bearer token, for what the Client does not wrap:
// Release or Resign by token on behalf of another holder (an operator's
// tool), say. Leases acquired through it are not renewed.
func (c *Client) API() coordinatorv1.CoordinatorClient { return c.api }

// Close stops the renewals and closes the connection. Every session, lease
// and leadership still held ends: its Done is closed and Err returns
// ErrClosed (before anything is released). Close then closes each session
// (its default session and those NewSession made) on the coordinator with
// one CloseSession, which releases every lease attached to it, best-effort,
// for up to the close timeout (WithCloseTimeout), so that waiters need not
// wait for their TTLs. Calls in progress (Lock, Campaign, Observe…) return
// ErrClosed or end. When Close returns, none of the Client's goroutines is
// left. Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.cancelClose(ErrClosed)
		c.goneMu.Lock()
		c.gone = true
		c.goneMu.Unlock()
		c.releaseAll(c.renewals.close())
		c.renewals.wg.Wait()
		c.stream.close() // ends the waits of calls that Close ended
		c.wg.Wait()
		c.closeErr = c.conn.Close()
	})
	return c.closeErr
}

// releaseAll releases what Close ended: it closes each session, which
// releases its leases, a few at a time, until the close timeout.
func (c *Client) releaseAll(held []*session) {
	if len(held) == 0 || c.closeTimeout <= 0 {
		return
	}
	// The Client's own context, which Close has just cancelled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.closing), c.closeTimeout)
	defer cancel()
	work := make(chan *session)
	var wg sync.WaitGroup
	for range min(len(held), 64) {
		wg.Go(func() {
			for s := range work {
				if err := c.closeSession(ctx, s.id); err != nil {
					c.log.Warn("coordinator: could not close a session on close; it expires after its TTL, with its leases",
						"session", s.id, "err", err)
				}
			}
		})
	}
	for _, s := range held {
		work <- s
	}
	close(work)
	wg.Wait()
}

// callCtx derives the context of a call from ctx, cancelled with ErrClosed
// when the Client is closed.
func (c *Client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if c.isClosed() {
		cancel(ErrClosed)
	}
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// track counts a goroutine that Close must wait for; false when the Client
// is closed, and the goroutine must not start.
func (c *Client) track() bool {
	c.goneMu.Lock()
	defer c.goneMu.Unlock()
	if c.gone {
		return false
	}
	c.wg.Add(1)
	return true
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool { return c.closing.Err() != nil }

// newCallBackoff returns the delays between the retries of a call or a
// stream: from retryMin (50ms), doubling, at most retryMax (2s).
func newCallBackoff() *backoff.Backoff {
	return backoff.NewWithJitter(retryMin, retryMax, retryJitter)
}

// newLeaderBackoff returns RunAsLeader's delays before campaigning again
// after fn returned early: from leaderRetryMin (100ms), doubling, at most
// leaderRetryMax (30s).
func newLeaderBackoff() *backoff.Backoff {
	return backoff.NewWithJitter(leaderRetryMin, leaderRetryMax, retryJitter)
}

// retryIn is how long to wait before retrying after err: b's next delay, or
// the delay the coordinator asked for (a data loss quarantine's RetryInfo)
// when that is longer.
func retryIn(b *backoff.Backoff, err error) time.Duration {
	return max(b.Next(), retryDelay(err))
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
