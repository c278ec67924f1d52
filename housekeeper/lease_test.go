package housekeeper

import (
	"testing"
	"time"
)

type fakeLease struct {
	done     chan struct{}
	deadline time.Time
}

func (l fakeLease) Done() <-chan struct{} { return l.done }
func (l fakeLease) Deadline() time.Time   { return l.deadline }

// A lease whose Done has not closed (the goroutine that would close it has
// not run yet, as after a process pause) but whose local deadline passed
// is done: no batch may start on it.
func TestIsDone(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	for _, tt := range []struct {
		name  string
		lease fakeLease
		want  bool
	}{
		{"live", fakeLease{make(chan struct{}), time.Now().Add(time.Minute)}, false},
		{"no deadline", fakeLease{make(chan struct{}), time.Time{}}, false},
		{"done closed", fakeLease{closed, time.Now().Add(time.Minute)}, true},
		{"past its deadline", fakeLease{make(chan struct{}), time.Now().Add(-time.Millisecond)}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := isDone(tt.lease); got != tt.want {
				t.Errorf("isDone = %v, want %v", got, tt.want)
			}
		})
	}
}
