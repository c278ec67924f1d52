package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/client"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/app"
)

// command is one coordctl subcommand.
type command struct {
	usage            string
	summary          string
	minArgs, maxArgs int
	takesCommand     bool // accepts -- CMD ARGS…
	run              func(a *cli, args, cmdline []string) int
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"lock": {"NAME [NAME…] [-- CMD ARGS…]", "wait for the lock NAME (with -n, one of its N slots; with -shared or -write, a read or write lock; with -session ID, in that session), " +
			fmt.Sprintf("then run CMD under it (or hold it until interrupted); several NAMEs (up to %d) are taken all at once or none, as one group", client.MaxGroupMembers),
			1, client.MaxGroupMembers, true, runLock},
		"elect":    {"ELECTION VALUE [-- CMD ARGS…]", "campaign until elected, then run CMD as the leader (or lead until interrupted)", 2, 2, true, runElect},
		"leader":   {"ELECTION", "show the sitting leader (exit 1 when there is none)", 1, 1, false, runLeader},
		"observe":  {"ELECTION", "print every change of leadership, one line each, until interrupted", 1, 1, false, runObserve},
		"describe": {"NAME", "show a name's lease, last fencing token and waiters", 1, 1, false, runDescribe},
		"list":     {"[PREFIX]", "list the held leases, optionally under PREFIX", 0, 1, false, runList},
		"release":  {"NAME HOLDER TOKEN", "release a lease on behalf of its holder (an operator's override)", 3, 3, false, runRelease},
		"session":  {"create | renew ID | close ID | describe ID | hold NAME… [-- CMD ARGS…]", "make, renew, close or show a session; hold locks in one (see below)", 1, 1 + maxHoldNames, true, runSession},
	}
}

var commandOrder = []string{"lock", "elect", "leader", "observe", "describe", "list", "release", "session"}

// cli is a coordctl invocation: its flags and outputs.
type cli struct {
	stdout, stderr io.Writer

	addr           string
	ttl            time.Duration
	timeout        time.Duration
	connectTimeout time.Duration
	grace          time.Duration
	output         string
	token          string
	insecureToken  bool
	tlsOn          bool
	tlsFiles       app.TLSFiles
	version        bool
	slots          int64  // lock -n: the semaphore's capacity
	shared, write  bool   // lock -shared, -write: a reader or writer of a read-write lock
	session        string // lock -session: the session to attach the lease to
	keep           bool   // session create -keep: renew it until interrupted

	tls *tls.Config // from the TLS flags, by check; nil: plaintext
}

func (a *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&a.addr, "addr", env("COORDINATOR_ADDR", "127.0.0.1:7400"), "coordinator address [$COORDINATOR_ADDR]")
	fs.DurationVar(&a.ttl, "ttl", client.DefaultTTL, "TTL of the session the lease or leadership is held in (lock, elect), or of the session (session create, session hold)")
	fs.DurationVar(&a.timeout, "timeout", 0, "lock, elect: how long to wait for the lock or leadership, connecting included (0: no limit);\n"+
		"leader, describe, list, release: how long the call may take (0: 10s); observe: not used")
	fs.DurationVar(&a.connectTimeout, "connect-timeout", 10*time.Second, "lock, elect, observe: how long to try to reach the coordinator before failing (0: no limit)")
	fs.Int64Var(&a.slots, "n", 1, "lock: hold one of the N slots of the semaphore NAME (every user of NAME must give the same N)")
	fs.BoolVar(&a.shared, "shared", false, "lock: hold NAME as a reader of a read-write lock, beside other readers")
	fs.BoolVar(&a.write, "write", false, "lock: hold NAME as the writer of a read-write lock (a plain lock on such a name is refused: its capacity differs)")
	fs.StringVar(&a.session, "session", "", "lock (one NAME): attach the lease to the session ID (session create), which another process renews;\n"+
		"it lasts as long as the session, and is released alone on the way out")
	fs.BoolVar(&a.keep, "keep", false, "session create: renew the session until interrupted, then close it")
	fs.DurationVar(&a.grace, "grace", 10*time.Second, "after SIGTERM, how long CMD may take to exit before SIGKILL")
	fs.StringVar(&a.output, "o", "text", "output format: text or json")
	fs.StringVar(&a.output, "output", "text", "output format: text or json (same as -o)")
	fs.StringVar(&a.token, "token", "", "bearer token the coordinator requires; needs TLS, or -insecure-token [$COORDINATOR_AUTH_TOKEN]")
	fs.BoolVar(&a.insecureToken, "insecure-token", false, "send -token over a plaintext connection too (loopback and tests only: anyone on the path can read it)")
	fs.BoolVar(&a.tlsOn, "tls", false, "connect with TLS (implied by the other -tls flags)")
	fs.StringVar(&a.tlsFiles.CA, "tls-ca", "", "PEM CA file to verify the coordinator with (default: system roots)")
	fs.StringVar(&a.tlsFiles.Cert, "tls-cert", "", "PEM client certificate file (mTLS)")
	fs.StringVar(&a.tlsFiles.Key, "tls-key", "", "PEM private key file of -tls-cert")
	fs.StringVar(&a.tlsFiles.ServerName, "tls-server-name", "", "server name to verify instead of the address's host")
	fs.BoolVar(&a.tlsFiles.InsecureSkipVerify, "insecure-skip-verify", false, "with TLS, do not verify the coordinator's certificate (testing only)")
	fs.BoolVar(&a.version, "version", false, "print the version and VCS revision, and exit")
	fs.Usage = func() {
		var b strings.Builder
		b.WriteString("Usage: coordctl [flags] COMMAND ARGS…  (flags may also follow COMMAND)\n\nCommands:\n")
		for _, name := range commandOrder {
			c := commands[name]
			fmt.Fprintf(&b, "  %-8s %s\n           %s\n", name, c.usage, c.summary)
		}
		b.WriteString(`
lock NAME and elect pass CMD the environment COORDINATOR_FENCING_TOKEN (the
fencing token, or the term) and COORDINATOR_LOCK_NAME or COORDINATOR_ELECTION;
lock also passes COORDINATOR_LOCK_NAMES and COORDINATOR_FENCING_TOKENS
(space-separated, in the same order): with several NAMEs, which it takes
all at once or none as one group (waiting in line for every NAME at once,
never deadlocking), they are how CMD learns each name's token;
lock -n N, -shared and -write hold a share of each NAME: one of N slots, a read
or the write lock of a read-write lock (a writer's token is above every
token granted before it);
CMD runs in its own process group, which gets SIGTERM (SIGKILL after -grace)
when the lease is lost, and the signals coordctl gets.

A session is a liveness that leases attach to: one renewal keeps them all,
and they end together. session create prints a new session's id (it expires
after -ttl unless renewed: session renew, or create -keep, which renews it
until interrupted and then closes it); lock -session ID attaches a lock to
it. session hold takes every NAME in one new session, which it renews, and
passes CMD COORDINATOR_SESSION_ID, COORDINATOR_LOCK_NAMES and
COORDINATOR_FENCING_TOKENS (space-separated, in the same order); closing the
session on the way out releases them all in one call.

Exit status: 0 success; 1 not acquired, lost, not found, unreachable or
failed; 2 bad usage; with CMD, CMD's own status when it ran to its end.

Flags:
`)
		_, _ = io.WriteString(fs.Output(), b.String())
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags anywhere before "--" and returns the positional
// arguments and what follows "--" (nil when there is no "--").
func parseArgs(fs *flag.FlagSet, args []string) (pos, rest []string, err error) {
	for i, arg := range args {
		if arg == "--" {
			rest = append([]string{}, args[i+1:]...)
			args = args[:i]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, rest, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// check validates the flags and loads the TLS files.
func (a *cli) check() error {
	switch {
	case a.output != "text" && a.output != "json":
		return fmt.Errorf("-o %q: want text or json", a.output)
	case a.ttl <= 0:
		return fmt.Errorf("-ttl %s: must be positive", a.ttl)
	case a.timeout < 0:
		return fmt.Errorf("-timeout %s: must not be negative", a.timeout)
	case a.connectTimeout < 0:
		return fmt.Errorf("-connect-timeout %s: must not be negative", a.connectTimeout)
	case a.slots < 1 || a.slots > client.MaxCapacity:
		return fmt.Errorf("-n %d: must be from 1 to %d", a.slots, client.MaxCapacity)
	case a.shared && a.write:
		return errors.New("-shared and -write: a read-write lock is held for reading or for writing")
	case (a.shared || a.write) && a.slots != 1:
		return errors.New("-n and -shared or -write: a semaphore's slots or a read-write lock, not both")
	case (a.tlsFiles.Cert == "") != (a.tlsFiles.Key == ""):
		return errors.New("-tls-cert and -tls-key go together")
	}
	if a.tlsOn || a.tlsFiles != (app.TLSFiles{}) {
		cfg, err := app.ClientTLS(a.tlsFiles)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		a.tls = cfg
	}
	if a.token == "" {
		a.token = os.Getenv("COORDINATOR_AUTH_TOKEN") // not a flag default: -help would show it
	}
	if a.token != "" && a.tls == nil && !a.insecureToken {
		return errors.New("-token needs TLS (-tls, -tls-ca…): over plaintext anyone on the path can read it; " +
			"add -insecure-token to send it anyway, on loopback and in tests")
	}
	return nil
}

func (a *cli) usageError(err error) int {
	code := app.ParseError(a.stderr, "coordctl", err)
	if code == app.ExitUsage {
		_, _ = fmt.Fprintln(a.stderr, "(see coordctl -help)")
	}
	return code
}

// fail reports err and returns the failure status. The coordinator's
// reason (SESSION_CLOSED, LEASE_NOT_HELD…) is named when its message does
// not: it is what a script tells errors apart by.
func (a *cli) fail(err error) int {
	msg := err.Error()
	if reason := client.ErrorReason(err); reason != "" && !strings.Contains(msg, reason) {
		msg += " (" + reason + ")"
	}
	a.warnf("%s", msg)
	return app.ExitFail
}

// printf writes to stdout. A write that fails (a closed pipe) has nowhere
// to be reported, and does not change the exit status.
func (a *cli) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(a.stdout, format, args...)
}

// warnf writes a line about trouble to stderr.
func (a *cli) warnf(format string, args ...any) {
	_, _ = fmt.Fprintf(a.stderr, "coordctl: "+format+"\n", args...)
}

// dial makes the Client the flags describe. Like every gRPC client, it
// connects lazily: at its first call, or in reach.
func (a *cli) dial() (*client.Client, error) {
	opts := []client.Option{
		// The TTL of the Client's default session, which lock and elect
		// hold their lease in.
		client.WithTTL(a.ttl),
		// Renewal trouble, retries and reconnects are worth seeing.
		client.WithLogger(slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	switch {
	case a.token != "" && a.insecureToken:
		opts = append(opts, client.WithInsecureBearerToken(a.token))
	case a.token != "":
		opts = append(opts, client.WithBearerToken(a.token))
	}
	if a.tls != nil {
		opts = append(opts, client.WithTLS(a.tls))
	}
	return client.New(a.addr, opts...)
}

// probe is a call that waits for the coordinator to be reachable
// (grpc.WaitForReady) and reports whether it answered.
type probe func(ctx context.Context, c *client.Client) error

// describeProbe describes the lock name: read-only, and it checks the name
// and the token before any waiting.
func describeProbe(name string) probe {
	return func(ctx context.Context, c *client.Client) error {
		_, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: name}, grpc.WaitForReady(true))
		return err
	}
}

// leaderProbe asks for the leader of election; read-only as well.
func leaderProbe(election string) probe {
	return func(ctx context.Context, c *client.Client) error {
		_, err := c.API().Leader(ctx, &coordinatorv1.LeaderRequest{Election: election}, grpc.WaitForReady(true))
		return err
	}
}

// reach waits, up to -connect-timeout and while ctx lasts, until the
// coordinator answers p. Lock, Campaign and Observe retry an unreachable
// coordinator for ever, which would look like waiting for the lease; reach
// turns that into an error that says so. What the coordinator answers does
// not matter here: an error of its own comes again from the real call.
// When ctx is cancelled (interrupted), reach returns ctx's error.
func (a *cli) reach(ctx context.Context, c *client.Client, p probe) error {
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if a.connectTimeout > 0 {
		pctx, cancel = context.WithTimeout(ctx, a.connectTimeout)
	}
	defer cancel()
	start := time.Now()
	err := p(pctx, c)
	switch {
	case err == nil || pctx.Err() == nil:
		return nil
	case errors.Is(ctx.Err(), context.Canceled):
		return ctx.Err()
	}
	return fmt.Errorf("cannot reach the coordinator at %s (gave up after %s): %s",
		a.addr, time.Since(start).Round(100*time.Millisecond), status.Convert(err).Message())
}

// callCtx bounds a one-shot call by -timeout (10s when not set) and by
// SIGINT/SIGTERM.
func (a *cli) callCtx() (context.Context, context.CancelFunc) {
	ctx, stop := app.SignalContext(context.Background())
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(a.timeout, 10*time.Second))
	return ctx, func() { cancel(); stop() }
}

// call runs one short command with a context bounded by -timeout (10s
// when 0) and the first signal. It does not wait for the coordinator to be
// reachable: the call fails at once when it refuses connections.
func (a *cli) call(run func(ctx context.Context, c *client.Client) int) int {
	c, err := a.dial()
	if err != nil {
		return a.fail(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := a.callCtx()
	defer cancel()
	return run(ctx, c)
}

// printJSON writes v as one line of JSON.
func (a *cli) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types are printed
	}
	a.printf("%s\n", b)
}

// text returns value for a text line: as is when printable, quoted otherwise.
func text(value []byte) string {
	s := string(value)
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f || r == '\uFFFD' }) || s == "" {
		return fmt.Sprintf("%q", s)
	}
	return s
}
