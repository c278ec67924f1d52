package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

// imageConfig is the part of an image's configuration the test checks.
type imageConfig struct {
	User         string
	ExposedPorts map[string]any
	Env          []string
	Entrypoint   []string
	Cmd          []string
	WorkingDir   string
	Labels       map[string]string
	Healthcheck  any
}

// podman runs podman (with the vfs storage driver, as make image does) and
// returns its standard output.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	bin := needTool(t, "Debian: apt-get install podman", "podman")
	cmd := exec.Command(bin, append([]string{"--storage-driver", "vfs"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// exportedFile is one entry of the image's exported filesystem.
type exportedFile struct {
	typ      byte
	mode     fs.FileMode
	uid, gid int
}

// TestImage builds the image as make image does (the Dockerfile's final
// stage, from binaries built on the host), checks its configuration and
// files, then runs its binaries from the exported filesystem against a
// Redis: init-store prepares the Redis, the coordinator serves gRPC health
// and grants at once, and the housekeeper joins it. The container itself
// is not run: these machines cannot run one (crun is refused rlimits and
// cgroups), so the user, the read-only root and the network namespace a
// runtime applies are not exercised. It runs only with
// COORDINATOR_TEST_IMAGE set, as make test-image sets it.
func TestImage(t *testing.T) {
	if os.Getenv("COORDINATOR_TEST_IMAGE") == "" {
		t.Skip("make test-image runs this test (make test does, after the other tests: building the image loads the machine); " +
			"or set COORDINATOR_TEST_IMAGE=1")
	}
	podman(t, "version") // skips without podman
	raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(raw))
	image := fmt.Sprintf("localhost/coordinator-test:%d", time.Now().UnixNano())
	build := exec.Command("./scripts/image.sh", image)
	build.Dir = root
	build.Env = append(os.Environ(), "IMAGE_STAGE="+t.TempDir(), "PODMAN=podman --storage-driver vfs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("podman", "--storage-driver", "vfs", "rmi", "--force", image).CombinedOutput(); err != nil {
			t.Logf("podman rmi %s: %v\n%s", image, err, out)
		}
	})

	// The configuration.
	var inspected []struct {
		Config      imageConfig
		Healthcheck any
	}
	if err := json.Unmarshal([]byte(podman(t, "image", "inspect", "--format", "json", image)), &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	cfg := inspected[0].Config
	revision := ""
	if out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		revision = strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"entrypoint", cfg.Entrypoint, []string{"/usr/local/bin/coordinator"}},
		{"cmd", cfg.Cmd, []string(nil)},
		{"user", cfg.User, "65532:65532"},
		{"working directory", cfg.WorkingDir, "/var/lib/coordinator"},
		{"exposed ports", sortedKeys(cfg.ExposedPorts), []string{"7400/tcp", "7401/tcp", "7402/tcp"}},
		{"healthcheck", fmt.Sprint(cfg.Healthcheck, inspected[0].Healthcheck), "<nil> <nil>"},
		{"version label", cfg.Labels["org.opencontainers.image.version"], version},
		{"revision label", cfg.Labels["org.opencontainers.image.revision"], revision},
		{"title label", cfg.Labels["org.opencontainers.image.title"], "coordinator"},
		{"source label", cfg.Labels["org.opencontainers.image.source"], "https://github.com/coordinator-dev/coordinator"},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("image %s: %v, want %v", c.what, c.got, c.want)
		}
	}
	for _, e := range []string{"COORDINATOR_LISTEN=:7400", "COORDINATOR_METRICS_LISTEN=:7401", "COORDINATOR_STATE_DIR=/var/lib/coordinator", "HOUSEKEEPER_METRICS_LISTEN=:7402"} {
		if !slices.Contains(cfg.Env, e) {
			t.Errorf("image environment %v lacks %s", cfg.Env, e)
		}
	}

	// The files: exactly these, from the exported filesystem.
	dir := t.TempDir()
	ctr := strings.TrimSpace(podman(t, "create", image))
	tarball := filepath.Join(t.TempDir(), "fs.tar")
	podman(t, "export", "--output", tarball, ctr)
	podman(t, "rm", ctr)
	files := untar(t, tarball, dir)
	want := map[string]exportedFile{
		"etc":                               {tar.TypeDir, 0o755, 0, 0},
		"etc/passwd":                        {tar.TypeReg, 0o644, 0, 0},
		"etc/group":                         {tar.TypeReg, 0o644, 0, 0},
		"etc/ssl":                           {tar.TypeDir, 0o755, 0, 0},
		"etc/ssl/certs":                     {tar.TypeDir, 0o755, 0, 0},
		"etc/ssl/certs/ca-certificates.crt": {tar.TypeReg, 0o644, 0, 0},
		"usr":                               {tar.TypeDir, 0o755, 0, 0},
		"usr/local":                         {tar.TypeDir, 0o755, 0, 0},
		"usr/local/bin":                     {tar.TypeDir, 0o755, 0, 0},
		"usr/local/bin/coordinator":         {tar.TypeReg, 0o755, 0, 0},
		"usr/local/bin/housekeeper":         {tar.TypeReg, 0o755, 0, 0},
		"usr/local/bin/coordctl":            {tar.TypeReg, 0o755, 0, 0},
		"var":                               {tar.TypeDir, 0o755, 0, 0},
		"var/lib":                           {tar.TypeDir, 0o755, 0, 0},
		"var/lib/coordinator":               {tar.TypeDir, 0o755, 65532, 65532},
	}
	for name, f := range files {
		if w, ok := want[name]; !ok {
			t.Errorf("the image holds %s, which it should not (no shell, nothing but the binaries and their files)", name)
		} else if f != w {
			t.Errorf("%s: %+v, want %+v", name, f, w)
		}
	}
	for name := range want {
		if _, ok := files[name]; !ok {
			t.Errorf("the image lacks %s", name)
		}
	}
	checkUser(t, dir, cfg.User)
	if certs, err := os.ReadFile(filepath.Join(dir, "etc/ssl/certs/ca-certificates.crt")); err != nil || bytes.Count(certs, []byte("BEGIN CERTIFICATE")) < 10 {
		t.Errorf("etc/ssl/certs/ca-certificates.crt holds %d certificates (%v), want the system's roots", bytes.Count(certs, []byte("BEGIN CERTIFICATE")), err)
	}
	bins := filepath.Join(dir, "usr/local/bin")
	for _, b := range []string{"coordinator", "housekeeper", "coordctl"} {
		checkStatic(t, filepath.Join(bins, b))
		out, err := exec.Command(filepath.Join(bins, b), "-version").Output()
		if err != nil || !strings.HasPrefix(string(out), b+" "+version+"\n") || !strings.Contains(string(out), "\nrevision "+revision) {
			t.Errorf("%s -version: %v\n%s\nwant version %s, revision %s", b, err, out, version, revision)
		}
	}

	// The binaries, run from the exported filesystem with the image's
	// environment, but on loopback ports of their own.
	env := func(extra ...string) []string {
		var e []string
		for _, kv := range cfg.Env {
			if !strings.Contains(kv, "_LISTEN=") {
				e = append(e, kv)
			}
		}
		return append(e, extra...)
	}
	redisEnv := []string{"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + redistest.URL(t),
		fmt.Sprintf("COORDINATOR_REDIS_KEY_PREFIX=image-test-%d", time.Now().UnixNano()), "COORDINATOR_LOG_FORMAT=text"}
	initStore := exec.Command(filepath.Join(bins, "coordinator"), "init-store")
	initStore.Env = env(redisEnv...)
	if out, err := initStore.CombinedOutput(); err != nil {
		t.Fatalf("coordinator init-store from the image: %v\n%s", err, out)
	}
	coord := startIn(t, filepath.Join(dir, "var/lib/coordinator"), filepath.Join(bins, "coordinator"),
		env(append(redisEnv, "COORDINATOR_LISTEN=127.0.0.1:0", "COORDINATOR_METRICS_LISTEN=127.0.0.1:0")...))
	addr := coord.WaitLog(t, grpcServing)[1]
	metricsAddr := coord.WaitLog(t, metricsServing)[1]
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, service := range []string{"", "coordinator.v1.Coordinator", "liveness"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health of %q: %v, %v; want SERVING", service, resp, err)
		}
	}
	grant, err := coordinatorv1.NewCoordinatorClient(conn).TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{
		Name: "image/test", Holder: "test", Ttl: durationpb.New(10 * time.Second),
	})
	if err != nil || !grant.GetAcquired() {
		t.Errorf("TryAcquire on the Redis init-store prepared: %v, %v; want a grant at once", grant, err)
	}
	if body := get(ctx, t, "http://"+metricsAddr+"/metrics"); !regexp.MustCompile(`(?m)^coordinator_store_up 1$`).MatchString(body) {
		t.Errorf("the coordinator's /metrics does not report its store up:\n%.2000s", body)
	}
	hk := start(t, filepath.Join(bins, "housekeeper"), env("HOUSEKEEPER_COORDINATOR_ADDR="+addr, "HOUSEKEEPER_REDIS_URL="+redistest.URL(t),
		fmt.Sprintf("HOUSEKEEPER_PREFIX=image-test-%d", time.Now().UnixNano()), "HOUSEKEEPER_INSTANCE_ID=image-hk", "HOUSEKEEPER_METRICS_LISTEN=",
		"HOUSEKEEPER_LOG_FORMAT=text"))
	hk.WaitLog(t, regexp.MustCompile(`msg="view published".* members=1`))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// untar extracts tarball into dir and returns its entries by path.
func untar(t *testing.T, tarball, dir string) map[string]exportedFile {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	files := map[string]exportedFile{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Clean("/"+h.Name), "/"), "/")
		if name == "" {
			continue
		}
		files[name] = exportedFile{h.Typeflag, fs.FileMode(h.Mode).Perm(), h.Uid, h.Gid}
		path := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return files
}

// checkUser checks that the image's user (UID:GID) has its entries in
// etc/passwd and etc/group, with the state directory as its home.
func checkUser(t *testing.T, dir, user string) {
	t.Helper()
	uid, gid, _ := strings.Cut(user, ":")
	passwd, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
	if !regexp.MustCompile(`(?m)^coordinator:x:` + uid + `:` + gid + `:[^:]*:/var/lib/coordinator:/sbin/nologin$`).Match(passwd) {
		t.Errorf("etc/passwd has no entry for %s:\n%s", user, passwd)
	}
	group, _ := os.ReadFile(filepath.Join(dir, "etc/group"))
	if !regexp.MustCompile(`(?m)^coordinator:x:` + gid + `:`).Match(group) {
		t.Errorf("etc/group has no entry for %s:\n%s", gid, group)
	}
}

// checkStatic checks that a binary needs no dynamic loader nor library: the
// image has none.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs the libraries %v", path, libs)
	}
}

func get(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
