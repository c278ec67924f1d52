package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Children and temporary directories are registered here, so that an
// interrupted bench (Ctrl-C, SIGTERM, or a closed stdout as with `| head`)
// still stops its children and removes its directories (an etcd data
// directory is 60MB and more). A normal run undoes each as it goes.
var exitHooks struct {
	mu   sync.Mutex
	next int
	fns  map[int]func()
}

// onExit registers fn to run if the bench is interrupted; the returned
// func unregisters it.
func onExit(fn func()) (unregister func()) {
	exitHooks.mu.Lock()
	defer exitHooks.mu.Unlock()
	if exitHooks.fns == nil {
		exitHooks.fns = map[int]func(){}
	}
	id := exitHooks.next
	exitHooks.next++
	exitHooks.fns[id] = fn
	return func() {
		exitHooks.mu.Lock()
		defer exitHooks.mu.Unlock()
		delete(exitHooks.fns, id)
	}
}

// removeOnExit registers the removal of a temporary directory and returns
// the removal, to be deferred.
func removeOnExit(dir string) func() {
	unregister := onExit(func() { _ = os.RemoveAll(dir) })
	return func() {
		unregister()
		_ = os.RemoveAll(dir)
	}
}

// stopOnSignals runs the registered hooks and exits on SIGINT, SIGTERM,
// SIGHUP or SIGPIPE (a write to a closed stdout).
func stopOnSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "bench: %v: stopping the children\n", s)
		exitHooks.mu.Lock()
		fns := exitHooks.fns
		exitHooks.fns = nil
		exitHooks.mu.Unlock()
		var wg sync.WaitGroup
		for _, fn := range fns {
			wg.Go(fn)
		}
		wg.Wait()
		os.Exit(1)
	}()
}
