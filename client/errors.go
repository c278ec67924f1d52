package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Compare with errors.Is: the errors returned wrap them with
// the name and the reason.
var (
	// ErrNotAcquired: the name is held by someone else (TryLock), or the
	// context ended before it was granted (Lock, Campaign). The error is a
	// *NotAcquiredError naming the holder when the coordinator said.
	ErrNotAcquired = errors.New("coordinator: not acquired")
	// ErrReleased: the lease was released (or the leadership resigned)
	// through this Client.
	ErrReleased = errors.New("coordinator: released")
	// ErrLost: the coordinator refused a renewal of the lease's session
	// (the session expired or was closed there), or a proclamation found
	// another term in office.
	ErrLost = errors.New("coordinator: lease lost")
	// ErrExpired: the lease's session could not be renewed before its
	// validity ran out by this process's clock (coordinator or store
	// unreachable). The coordinator may still hold it until its own expiry,
	// a little later; nobody else can be granted it before then.
	ErrExpired = errors.New("coordinator: lease expired before it could be renewed")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("coordinator: client closed")
	// ErrNoLeader: the election has no leader.
	ErrNoLeader = errors.New("coordinator: election has no leader")
)

// NotAcquiredError reports a lease or leadership that was not granted. It
// matches ErrNotAcquired with errors.Is, and the context error that ended a
// wait (context.DeadlineExceeded, context.Canceled) through Unwrap.
type NotAcquiredError struct {
	// Name is the lock or election name.
	Name string
	// Holder is who holds it, as the coordinator last said; empty when it
	// did not say (the name was free but older waiters came first, or the
	// wait ended before an answer).
	Holder string
	// Err is why waiting ended, or nil (TryLock).
	Err error
}

// Error describes the name, its holder and why waiting ended.
func (e *NotAcquiredError) Error() string {
	msg := fmt.Sprintf("coordinator: %q not acquired", e.Name)
	if e.Holder != "" {
		msg += ": held by " + e.Holder
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Unwrap returns the error that ended the wait.
func (e *NotAcquiredError) Unwrap() error { return e.Err }

// ErrorReason returns the coordinator's google.rpc.ErrorInfo reason carried
// by err ("LEASE_NOT_HELD", "DATA_LOSS_QUARANTINE", "STORE_UNAVAILABLE",
// "INVALID_FIELD"), or "" when it carries none.
func ErrorReason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// transient reports whether a call that failed with err may succeed when
// tried again (ClientRules.transient_codes).
func transient(err error) bool {
	return !errors.Is(err, ErrClosed) && transientCodes[status.Code(err)]
}

// retryDelay is the delay the coordinator asked for in a RetryInfo (a data
// loss quarantine), or 0.
func retryDelay(err error) time.Duration {
	st, ok := status.FromError(err)
	if !ok {
		return 0
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok {
			return info.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// outcomeUnknown reports whether a call that failed with err may still have
// changed state on the coordinator (the reply, not the request, was lost):
// its code is one of ClientRules.outcome_unknown_codes, or the call was cut
// short here (its context ended, or the Client closed).
func outcomeUnknown(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed) {
		return true
	}
	return outcomeUnknownCodes[status.Code(err)]
}

// callError turns the error of a call made with a context from callCtx into
// what the caller should see: ErrClosed when the Client was closed, the
// context's own error when it ended, the coordinator's status otherwise.
func callError(ctx context.Context, op string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("coordinator: %s: %w", op, cause)
	}
	return fmt.Errorf("coordinator: %s: %w", op, err)
}
