package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
)

// runInitStore runs `coordinator init-store` with env and returns its exit
// status and output.
func runInitStore(t *testing.T, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(buildBinary(t), "init-store")
	cmd.Env = append([]string{"COORDINATOR_LOG_FORMAT=text"}, env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("init-store: %v\n%s", err, out)
	return 0, ""
}

// init-store on a brand-new Redis lets the first coordinator grant at once;
// a second init-store refuses the Redis, which is no longer new.
func TestInitStorePreparesANewRedisOnceAndRefusesItThen(t *testing.T) {
	redisEnv := []string{"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + redistest.URL(t),
		fmt.Sprintf("COORDINATOR_REDIS_KEY_PREFIX=init-store-%d", time.Now().UnixNano())}

	if code, out := runInitStore(t, redisEnv...); code != 0 || !strings.Contains(out, "wrote the data-loss markers") {
		t.Fatalf("init-store on a new Redis: exit %d\n%s", code, out)
	}

	p := startBinary(t, redisEnv...)
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := coordinatorv1.NewCoordinatorClient(conn).TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{
		Name: "demo/job", Holder: "alice", Ttl: durationpb.New(30 * time.Second),
	})
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("TryAcquire on the first start after init-store: %v, %v; want a grant, not a quarantine", resp, err)
	}
	if log := p.Log(); strings.Contains(log, "lost its data") {
		t.Errorf("the first start after init-store reported a data loss:\n%s", log)
	}

	code, out := runInitStore(t, redisEnv...)
	if code != 1 || !regexp.MustCompile(`not new.*markers`).MatchString(out) {
		t.Fatalf("a second init-store: exit %d\n%s\nwant exit status 1 saying the Redis is not new, having markers", code, out)
	}
}

func TestInitStoreIsForTheRedisStore(t *testing.T) {
	if code, out := runInitStore(t, "COORDINATOR_STORE=memory"); code != 2 || !strings.Contains(out, "needs nothing") {
		t.Fatalf("init-store on the memory store: exit %d\n%s; want a usage error", code, out)
	}
}

func TestInitStoreFailsOnAnUnreachableRedis(t *testing.T) {
	code, out := runInitStore(t, "COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=redis://127.0.0.1:1/0", "COORDINATOR_STORE_TIMEOUT=500ms")
	if code != 1 || !strings.Contains(out, "init-store failed") {
		t.Fatalf("init-store on a closed port: exit %d\n%s", code, out)
	}
}
