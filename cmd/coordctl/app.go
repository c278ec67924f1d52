package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coordinator-dev/coordinator/client"
)

// command is one coordctl subcommand.
type command struct {
	usage            string
	summary          string
	minArgs, maxArgs int
	takesCommand     bool // accepts -- CMD ARGS…
	run              func(a *app, args, cmdline []string) int
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"lock":     {"NAME [-- CMD ARGS…]", "wait for the lock NAME, then run CMD under it (or hold it until interrupted)", 1, 1, true, runLock},
		"elect":    {"ELECTION VALUE [-- CMD ARGS…]", "campaign until elected, then run CMD as the leader (or lead until interrupted)", 2, 2, true, runElect},
		"leader":   {"ELECTION", "show the sitting leader (exit 1 when there is none)", 1, 1, false, runLeader},
		"observe":  {"ELECTION", "print every change of leadership, one line each, until interrupted", 1, 1, false, runObserve},
		"describe": {"NAME", "show a name's lease, last fencing token and waiters", 1, 1, false, runDescribe},
		"list":     {"[PREFIX]", "list the held leases, optionally under PREFIX", 0, 1, false, runList},
		"release":  {"NAME HOLDER TOKEN", "release a lease on behalf of its holder (an operator's override)", 3, 3, false, runRelease},
	}
}

var commandOrder = []string{"lock", "elect", "leader", "observe", "describe", "list", "release"}

// app is a coordctl invocation: its flags and outputs.
type app struct {
	stdout, stderr io.Writer

	addr        string
	ttl         time.Duration
	timeout     time.Duration
	grace       time.Duration
	output      string
	token       string
	tlsOn       bool
	tlsCA       string
	tlsCert     string
	tlsKey      string
	tlsInsecure bool
	serverName  string
}

func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&a.addr, "addr", env("COORDINATOR_ADDR", "127.0.0.1:7400"), "coordinator address [$COORDINATOR_ADDR]")
	fs.DurationVar(&a.ttl, "ttl", client.DefaultTTL, "TTL of the lease or leadership (lock, elect)")
	fs.DurationVar(&a.timeout, "timeout", 0, "lock, elect: how long to wait for the lock or leadership (0: no limit); other commands: call timeout (0: 10s)")
	fs.DurationVar(&a.grace, "grace", 10*time.Second, "after SIGTERM, how long CMD may take to exit before SIGKILL")
	fs.StringVar(&a.output, "o", "text", "output format: text or json")
	fs.StringVar(&a.output, "output", "text", "output format: text or json (same as -o)")
	fs.StringVar(&a.token, "token", "", "bearer token the coordinator requires [$COORDINATOR_AUTH_TOKEN]")
	fs.BoolVar(&a.tlsOn, "tls", false, "connect with TLS (implied by the other -tls flags)")
	fs.StringVar(&a.tlsCA, "tls-ca", "", "PEM CA file to verify the coordinator with (default: system roots)")
	fs.StringVar(&a.tlsCert, "tls-cert", "", "PEM client certificate file (mTLS)")
	fs.StringVar(&a.tlsKey, "tls-key", "", "PEM private key file of -tls-cert")
	fs.StringVar(&a.serverName, "tls-server-name", "", "server name to verify instead of the address's host")
	fs.BoolVar(&a.tlsInsecure, "insecure-skip-verify", false, "with TLS, do not verify the coordinator's certificate (testing only)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: coordctl [flags] COMMAND ARGS…  (flags may also follow COMMAND)\n\nCommands:\n")
		for _, name := range commandOrder {
			c := commands[name]
			fmt.Fprintf(w, "  %-8s %s\n           %s\n", name, c.usage, c.summary)
		}
		fmt.Fprintf(w, `
lock and elect pass CMD the environment COORDINATOR_FENCING_TOKEN (the
fencing token, or the term) and COORDINATOR_LOCK_NAME or COORDINATOR_ELECTION;
CMD runs in its own process group, which gets SIGTERM (SIGKILL after -grace)
when the lease is lost, and the signals coordctl gets.

Exit status: 0 success; 1 not acquired, lost, not found or failed; 2 bad
usage; with CMD, CMD's own status when it ran to its end.

Flags:
`)
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

// check validates the flags.
func (a *app) check() error {
	switch {
	case a.output != "text" && a.output != "json":
		return fmt.Errorf("-o %q: want text or json", a.output)
	case a.ttl <= 0:
		return fmt.Errorf("-ttl %s: must be positive", a.ttl)
	case a.timeout < 0:
		return fmt.Errorf("-timeout %s: must not be negative", a.timeout)
	case (a.tlsCert == "") != (a.tlsKey == ""):
		return errors.New("-tls-cert and -tls-key go together")
	}
	return nil
}

func (a *app) usageError(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(a.stderr, "coordctl: %v\n(see coordctl -help)\n", err)
	return exitUsage
}

// fail reports err and returns the failure status.
func (a *app) fail(err error) int {
	fmt.Fprintf(a.stderr, "coordctl: %v\n", err)
	return exitFail
}

// connect makes the Client the flags describe.
func (a *app) connect() (*client.Client, error) {
	if a.token == "" {
		a.token = os.Getenv("COORDINATOR_AUTH_TOKEN") // not a flag default: -help would show it
	}
	opts := []client.Option{
		client.WithTTL(a.ttl),
		// Renewal trouble and reconnects are worth seeing.
		client.WithLogger(slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	if a.token != "" {
		opts = append(opts, client.WithBearerToken(a.token))
	}
	if a.tlsOn || a.tlsCA != "" || a.tlsCert != "" || a.tlsInsecure || a.serverName != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.serverName, InsecureSkipVerify: a.tlsInsecure} //nolint:gosec // opt-in flag
		if a.tlsCA != "" {
			pem, err := os.ReadFile(a.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("read -tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-tls-ca %s holds no PEM certificate", a.tlsCA)
			}
		}
		if a.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(a.tlsCert, a.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("load -tls-cert/-tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	return client.New(a.addr, opts...)
}

// callCtx bounds a one-shot call by -timeout (10s when not set) and by
// SIGINT/SIGTERM.
func (a *app) callCtx() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	timeout := a.timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}

// call connects and runs one short command with a context bounded by
// -timeout (10s when 0) and the first signal.
func (a *app) call(run func(ctx context.Context, c *client.Client) int) int {
	c, err := a.connect()
	if err != nil {
		return a.fail(err)
	}
	defer c.Close()
	ctx, cancel := a.callCtx()
	defer cancel()
	return run(ctx, c)
}

// printJSON writes v as one line of JSON.
func (a *app) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types are printed
	}
	fmt.Fprintf(a.stdout, "%s\n", b)
}

// text returns value for a text line: as is when printable, quoted otherwise.
func text(value []byte) string {
	s := string(value)
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f || r == '\uFFFD' }) || s == "" {
		return fmt.Sprintf("%q", s)
	}
	return s
}
