package housekeeper

import "time"

// expiring is a lease as the housekeeper checks it: *client.Lease.
type expiring interface {
	Done() <-chan struct{} // closed the moment the lease is lost or released
	// Deadline is when the lease stops being valid by this process's clock
	// unless renewed first; zero when there is no such deadline.
	Deadline() time.Time
}

// isDone reports whether l is lost or released, or past its deadline: a
// process that was paused (a long GC, a stopped VM) must not start a batch
// before the goroutine that notices the loss has run. The deadline is on
// the real clock, so it is read against time.Now.
func isDone(l expiring) bool {
	select {
	case <-l.Done():
		return true
	default:
		d := l.Deadline()
		return !d.IsZero() && !time.Now().Before(d)
	}
}
