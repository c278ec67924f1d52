package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// coordinatorBuilds builds ./cmd/coordinator once per run (and once more,
// with the profiling hook, when a profile is asked for).
type coordinatorBuilds struct {
	prebuilt string // -coordinator-bin

	mu     sync.Mutex
	dir    string
	remove func()
	bins   map[bool]string // profiled -> binary
}

// repoRoot is the directory of the coordinator module: the replace
// directive's target, as the go command resolves it.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/coordinator-dev/coordinator").Output()
	if err != nil {
		return "", fmt.Errorf("find the repository (go list -m github.com/coordinator-dev/coordinator, run from bench/): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// profileHook is added to package main of cmd/coordinator at build time
// (go build -overlay), never to the repository: the coordinator's own
// -cpu-profile covers its whole run, while the bench profiles only the
// windows it measures. With COORDINATOR_BENCH_PPROF_LISTEN set it
// serves net/http/pprof there, plus /bench/cpuprofile/start?file=F and
// /bench/cpuprofile/stop, so that the bench profiles exactly the window it
// measures.
const profileHook = `package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	rpprof "runtime/pprof"
	"sync"
)

func init() {
	addr := os.Getenv("COORDINATOR_BENCH_PPROF_LISTEN")
	if addr == "" {
		return
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var f *os.File
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/bench/cpuprofile/start", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		out, err := os.Create(r.URL.Query().Get("file"))
		if err == nil {
			if err = rpprof.StartCPUProfile(out); err != nil {
				_ = out.Close()
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f = out
	})
	mux.HandleFunc("/bench/cpuprofile/stop", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if f == nil {
			http.Error(w, "not profiling", http.StatusConflict)
			return
		}
		rpprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		f = nil
	})
	go func() { _ = http.Serve(lis, mux) }()
}
`

// binary returns the coordinator binary, built on first use.
func (b *coordinatorBuilds) binary(profiled bool) (string, error) {
	if b.prebuilt != "" && !profiled {
		return b.prebuilt, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if bin, ok := b.bins[profiled]; ok {
		return bin, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "bench-coordinator-"); err != nil {
			return "", err
		}
		b.remove = removeOnExit(b.dir)
		b.bins = map[bool]string{}
	}
	bin := filepath.Join(b.dir, "coordinator")
	args := []string{"build", "-o", bin}
	if profiled {
		bin += "-profiled"
		hook := filepath.Join(b.dir, "bench_profile_hook.go")
		overlay := filepath.Join(b.dir, "overlay.json")
		spec, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, "cmd", "coordinator", "zz_bench_profile_hook.go"): hook}})
		if err := os.WriteFile(hook, []byte(profileHook), 0o600); err != nil {
			return "", err
		}
		if err := os.WriteFile(overlay, spec, 0o600); err != nil {
			return "", err
		}
		args = []string{"build", "-overlay", overlay, "-o", bin}
	}
	// Built in the repository's own module, with its own dependency
	// versions, as its users build it: not with the bench module's.
	cmd := exec.Command("go", append(args, "./cmd/coordinator")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the coordinator: %w\n%s", err, out)
	}
	b.bins[profiled] = bin
	return bin, nil
}

func (b *coordinatorBuilds) cleanup() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.remove != nil {
		b.remove()
	}
}

// coordOpts configures one coordinator child.
type coordOpts struct {
	store    string // "redis" or "memory"
	stateDir string // memory store's state directory; "": none
	metrics  bool   // serve /metrics on a free port
	caps     bool   // keep the default caps (otherwise all off)
	env      []string
	profiled bool // built with the profiling hook (see startProfile)
}

// coordinator is a coordinator child process on a loopback port, with a
// client connection to it.
type coordinator struct {
	addr       string
	metricsURL string
	pprofURL   string
	prefix     string
	cmd        *exec.Cmd
	exited     chan struct{}
	conn       *grpc.ClientConn
	client     coordinatorv1.CoordinatorClient
	// extra are the connections of clients(), closed by stop.
	extra     []*grpc.ClientConn
	profiling bool
	stopOnce  sync.Once
	// unregister undoes the onExit of the child.
	unregister func()
}

// capsOff turns every per-connection, per-holder and global cap off (0: no
// limit): the bench measures throughput and cost at loads past the default
// caps (10,000 leases of one holder, 5,000 observers, 100 streams of one
// connection…).
var capsOff = []string{
	"COORDINATOR_MAX_STREAMS_PER_CONN=0",
	"COORDINATOR_MAX_STREAMS=0",
	"COORDINATOR_MAX_WAITS_PER_CONN=0",
	"COORDINATOR_MAX_WAITS=0",
	"COORDINATOR_MAX_LEASES_PER_HOLDER=0",
}

func (e benchEnv) startCoordinator(storeKind string) (*coordinator, error) {
	return e.startCoordinatorWith(coordOpts{store: storeKind})
}

// startCoordinatorWith builds (once) and starts a coordinator child.
func (e benchEnv) startCoordinatorWith(o coordOpts) (*coordinator, error) {
	bin, err := e.builds.binary(o.profiled)
	if err != nil {
		return nil, err
	}
	c := &coordinator{
		addr:   freeAddr(),
		prefix: fmt.Sprintf("bench-%s-%d", o.store, time.Now().UnixNano()),
		exited: make(chan struct{}),
	}
	env := []string{
		"COORDINATOR_LISTEN=" + c.addr,
		"COORDINATOR_METRICS_LISTEN=",
		"COORDINATOR_STORE=" + o.store,
		"COORDINATOR_STATE_DIR=" + o.stateDir,
		"COORDINATOR_REDIS_URL=" + e.redisURL,
		"COORDINATOR_REDIS_KEY_PREFIX=" + c.prefix,
		"COORDINATOR_REDIS_NEW_STORE=true", // a fresh key prefix is a new store
		"COORDINATOR_LOG_LEVEL=error",
	}
	if o.metrics {
		m := freeAddr()
		env = append(env, "COORDINATOR_METRICS_LISTEN="+m)
		c.metricsURL = "http://" + m + "/metrics"
	}
	if !o.caps {
		env = append(env, capsOff...)
	}
	if e.coordProcs > 0 {
		// Fixed, as an operator's GOMAXPROCS: the coordinator's governor
		// (internal/app.GovernProcs) then stays off.
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", e.coordProcs))
	}
	if o.profiled {
		p := freeAddr()
		env = append(env, "COORDINATOR_BENCH_PPROF_LISTEN="+p)
		c.pprofURL = "http://" + p
	}
	env = append(env, o.env...)
	c.cmd = exec.Command(bin)
	// The environment without any COORDINATOR_* setting of the caller's
	// (a token, an access file…), OTEL_* (tracing) nor GOMAXPROCS (the
	// bench's own, or -coordinator-gomaxprocs): only what is set here.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COORDINATOR_") && !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			c.cmd.Env = append(c.cmd.Env, kv)
		}
	}
	c.cmd.Env = append(c.cmd.Env, env...)
	c.cmd.Stdout, c.cmd.Stderr = os.Stderr, os.Stderr
	c.cmd.SysProcAttr = childAttr()
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the coordinator: %w", err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	c.unregister = onExit(c.stop)
	if c.conn, err = dial(c.addr); err != nil {
		c.stop()
		return nil, err
	}
	c.client = coordinatorv1.NewCoordinatorClient(c.conn)
	if err := waitServing(c.conn, c.exited, 30*time.Second); err != nil {
		c.stop()
		return nil, fmt.Errorf("the %s coordinator did not start: %w", o.store, err)
	}
	return c, nil
}

// dial is the client connection of every raw gRPC measurement, the
// coordinator's and the echo's alike: one HTTP/2 connection, plaintext.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// waitServing polls the gRPC health service until it reports SERVING.
func waitServing(conn *grpc.ClientConn, exited <-chan struct{}, limit time.Duration) error {
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("health: %s", resp.GetStatus())
		}
		select {
		case <-exited:
			return errors.New("the process exited")
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamsPerConn is how many long calls (streams, waits) one bench
// connection carries: clients spread over many connections, as real ones do,
// so that per-connection limits are not what is measured.
const streamsPerConn = 100

// clients returns a client for each of n long calls, a new connection for
// every streamsPerConn of them.
func (c *coordinator) clients(n int) ([]coordinatorv1.CoordinatorClient, error) {
	out := make([]coordinatorv1.CoordinatorClient, n)
	for i := range n {
		if i%streamsPerConn == 0 {
			conn, err := dial(c.addr)
			if err != nil {
				return nil, err
			}
			c.extra = append(c.extra, conn)
		}
		out[i] = coordinatorv1.NewCoordinatorClient(c.extra[len(c.extra)-1])
	}
	return out, nil
}

// startProfile starts a CPU profile of the child into file (the child must
// have been started with a profile asked for).
func (c *coordinator) startProfile(file string) error {
	if c.pprofURL == "" {
		return errors.New("coordinator cpu profile: the child was started without the profiling hook")
	}
	if c.profiling {
		return errors.New("coordinator cpu profile: already profiling")
	}
	file, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	if err := httpGet(c.pprofURL + "/bench/cpuprofile/start?file=" + url.QueryEscape(file)); err != nil {
		return fmt.Errorf("coordinator cpu profile: %w", err)
	}
	c.profiling = true
	return nil
}

// stopProfile stops the child's CPU profile, if one runs, and writes it.
func (c *coordinator) stopProfile() error {
	if !c.profiling {
		return nil
	}
	c.profiling = false
	if err := httpGet(c.pprofURL + "/bench/cpuprofile/stop"); err != nil {
		return fmt.Errorf("coordinator cpu profile: %w", err)
	}
	return nil
}

// mergeProfiles merges CPU profiles of one binary into out (go tool pprof
// adds up profiles given together).
func mergeProfiles(out string, files []string) error {
	if len(files) == 0 {
		return errors.New("no profile taken")
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", append([]string{"tool", "pprof", "-proto"}, files...)...)
	cmd.Stdout = f
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("merge the coordinator's profiles (go tool pprof -proto): %w\n%s", err, stderr.Bytes())
	}
	return nil
}

func httpGet(url string) error {
	resp, err := http.Get(url) //nolint:noctx // a loopback child of ours
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// stop closes the connections and stops the child: SIGINT, a graceful
// shutdown, SIGKILL after 15s.
func (c *coordinator) stop() { c.stopOnce.Do(c.stopNow) }

func (c *coordinator) stopNow() {
	c.unregister()
	if err := c.stopProfile(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
	if c.conn != nil {
		_ = c.conn.Close()
	}
	for _, conn := range c.extra {
		_ = conn.Close()
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// metric reads one unlabelled sample from the child's /metrics (metrics on).
func (c *coordinator) metric(name string) (float64, error) {
	if c.metricsURL == "" {
		return 0, errors.New("metrics are off")
	}
	resp, err := http.Get(c.metricsURL) //nolint:noctx // a loopback child of ours
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}

// stateWrites reads coordinator_state_writes_total: how often the memory
// store wrote (and fsynced) its state file.
func (c *coordinator) stateWrites() float64 {
	n, _ := c.metric("coordinator_state_writes_total")
	return n
}

func freeAddr() string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = lis.Close() }()
	return lis.Addr().String()
}
