package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/internal/app"
)

// holding is what lock and elect hold: a lease or a leadership.
type holding interface {
	Done() <-chan struct{}
	Err() error
}

// held is an acquired holding and how lock or elect shows, passes on and
// gives it up.
type held struct {
	holding
	announce func()                          // print it, when no command runs
	env      []string                        // for the command
	giveUp   func(ctx context.Context) error // Release or Resign
	giveUpAs string                          // "release" or "resign", for messages
}

// ignoreAnswer makes a Release or Resign a giveUp: whether the coordinator
// still held it does not change how coordctl exits.
func ignoreAnswer(giveUp func(context.Context) (bool, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := giveUp(ctx)
		return err
	}
}

// holdWhile is what lock and elect share: reach the coordinator with p
// (up to -connect-timeout), wait (in fair order, up to -timeout or the first
// signal) for acquire, then run cmdline while holding what it got, or hold
// it until interrupted, and give it up on the way out.
func (a *cli) holdWhile(verb, what string, cmdline []string, p probe, acquire func(context.Context, *client.Client) (held, error)) int {
	if cmdline != nil && len(cmdline) == 0 {
		return a.usageError(fmt.Errorf("%s: no command after --", verb))
	}
	sigs := watchSignals()
	defer sigs.stop()
	c, err := a.dial()
	if err != nil {
		return a.fail(err)
	}
	defer func() { _ = c.Close() }()

	ctx, cancel := a.waitCtx(sigs)
	err = a.reach(ctx, c, p)
	var h held
	if err == nil {
		h, err = acquire(ctx, c)
	}
	cancel()
	if err != nil {
		return a.waitFailed(sigs, what, err)
	}
	defer func() {
		ctx, cancel := releaseCtx()
		defer cancel()
		ended := h.Err() // reported already
		if err := h.giveUp(ctx); err != nil && ended == nil {
			a.warnf("%s: %v (it expires after its TTL)", h.giveUpAs, err)
		}
	}()
	if cmdline == nil {
		h.announce()
		return a.holdUntilInterrupted(h, sigs)
	}
	return a.runHeld(h, sigs, cmdline, h.env)
}

// signals watches SIGINT, SIGTERM and SIGHUP from the moment it is made, so
// that none is missed between waiting for the lease and running CMD.
type signals struct {
	// interrupted is cancelled by the first signal.
	interrupted context.Context
	// fwd receives every signal, to forward to CMD.
	fwd  chan os.Signal
	stop func()
}

func watchSignals() *signals {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	s := &signals{interrupted: ctx, fwd: make(chan os.Signal, 16)}
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				cancel()
				select {
				case s.fwd <- sig:
				default:
				}
			case <-quit:
				return
			}
		}
	}()
	s.stop = func() {
		signal.Stop(ch)
		close(quit)
		cancel()
	}
	return s
}

// holdUntilInterrupted waits for a signal (status 0) or the end of h
// (status 1).
func (a *cli) holdUntilInterrupted(h holding, sigs *signals) int {
	select {
	case <-sigs.interrupted.Done():
		return app.ExitOK
	case <-h.Done():
		return a.fail(fmt.Errorf("lost: %w", h.Err()))
	}
}

// runHeld runs argv with env added while h is held. It forwards the
// signals coordctl gets to CMD's process group; when h ends first it sends
// the group SIGTERM, then SIGKILL after the grace period, and returns 1.
// Otherwise it returns CMD's exit status (128+N when killed by signal N).
func (a *cli) runHeld(h holding, sigs *signals, argv, env []string) int {
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec // running the user's CMD is what lock and elect are for
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Its own process group, so that a lost lease stops CMD's children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		a.warnf("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	group := -cmd.Process.Pid
	var (
		lost  error
		kill  <-chan time.Time
		timer *time.Timer
	)
	terminate := func(sig syscall.Signal) {
		_ = syscall.Kill(group, sig)
		if timer == nil {
			timer = time.NewTimer(a.grace)
			kill = timer.C
		}
	}
	done := h.Done()
	for {
		select {
		case <-exited:
			if timer != nil {
				timer.Stop()
			}
			if lost != nil {
				a.warnf("lost, so CMD was stopped: %v", lost)
				return app.ExitFail
			}
			return exitStatus(cmd.ProcessState)
		case sig := <-sigs.fwd:
			terminate(sig.(syscall.Signal))
		case <-done:
			done = nil
			lost = h.Err()
			terminate(syscall.SIGTERM)
		case <-kill:
			_ = syscall.Kill(group, syscall.SIGKILL)
			kill = nil
		}
	}
}

func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// releaseCtx bounds releasing or resigning on the way out.
func releaseCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}
