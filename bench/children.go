package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// child is this binary re-executed as a server (-serve-echo, -serve-etcd).
// It says "ready" on stdout once it serves, and exits when its stdin
// closes, so that it never outlives the bench, however the bench ends.
type child struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	exited     chan struct{}
	unregister func()
}

func startChild(what string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &child{cmd: exec.Command(self, args...), exited: make(chan struct{})}
	c.cmd.Stderr = os.Stderr
	c.cmd.SysProcAttr = childAttr()
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s child: %w", what, err)
	}
	c.unregister = onExit(c.stop)
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	select {
	case err = <-ready:
	case <-time.After(60 * time.Second):
		err = errors.New("not ready after 60s")
	}
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("the %s child: %w", what, err)
	}
	return c, nil
}

func (c *child) stop() {
	c.unregister()
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// untilStdinCloses blocks until the parent closes our stdin (or exits).
func untilStdinCloses() { _, _ = io.Copy(io.Discard, os.Stdin) }

// serveEcho is the echo child: a gRPC server with nothing but the health
// service, default options, so a Check is the cheapest call gRPC makes
// across processes. It is the ceiling of any unary gRPC service here.
func serveEcho(addr string) int {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench echo: %v\n", err)
		return 1
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	fmt.Println("ready")
	untilStdinCloses()
	srv.Stop()
	return 0
}

// startEcho starts the echo child on a free loopback port.
func startEcho() (*child, string, error) {
	addr := freeAddr()
	c, err := startChild("echo", "-serve-echo", addr)
	return c, addr, err
}

// serveEtcd is the etcd child: a one-member etcd (embed) with its data in
// dir, etcd's defaults otherwise (the WAL fsynced on every commit), logging
// errors only.
func serveEtcd(spec string) int {
	parts := strings.SplitN(spec, ",", 3)
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "bench etcd: -serve-etcd %q: want CLIENT_ADDR,PEER_ADDR,DATA_DIR\n", spec)
		return 2
	}
	clientURL, peerURL := url.URL{Scheme: "http", Host: parts[0]}, url.URL{Scheme: "http", Host: parts[1]}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = parts[2]
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Errors only, and none once it is told to stop (closing its listeners
	// is logged as errors).
	level := zap.NewAtomicLevelAt(zap.ErrorLevel)
	zc := zap.NewProductionConfig()
	zc.Level = level
	zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	lg, err := zc.Build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench etcd: %v\n", err)
		return 1
	}
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench etcd: %v\n", err)
		return 1
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "bench etcd: not ready after 60s")
		e.Close()
		return 1
	}
	fmt.Println("ready")
	stdin := make(chan struct{})
	go func() { untilStdinCloses(); close(stdin) }()
	select {
	case <-stdin:
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "bench etcd: %v\n", err)
		e.Close()
		return 1
	}
	level.SetLevel(zap.FatalLevel)
	e.Close()
	return 0
}

// etcdChild is an etcd child and its data directory.
type etcdChild struct {
	*child
	endpoint string
	remove   func()
}

// startEtcd starts the etcd child on free loopback ports, its data in a
// new temporary directory (on the same disk as everything else: fsyncs
// are real).
func startEtcd() (*etcdChild, error) {
	dir, err := os.MkdirTemp("", "bench-etcd-")
	if err != nil {
		return nil, err
	}
	remove := removeOnExit(dir)
	endpoint := freeAddr()
	c, err := startChild("etcd", "-serve-etcd", strings.Join([]string{endpoint, freeAddr(), dir}, ","))
	if err != nil {
		remove()
		return nil, err
	}
	return &etcdChild{child: c, endpoint: endpoint, remove: remove}, nil
}

func (e *etcdChild) stop() {
	e.child.stop()
	e.remove()
}
