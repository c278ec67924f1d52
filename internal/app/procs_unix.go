//go:build unix

package app

import (
	"syscall"
	"time"
)

// processCPU is the CPU time, user and system, of all the process's
// threads so far.
func processCPU() (time.Duration, bool) {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0, false
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano()), true
}
