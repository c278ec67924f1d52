//go:build unix

package statefile

import (
	"errors"
	"os"
	"syscall"
)

// lock takes an exclusive flock on f without waiting. A flock belongs to the
// open file, so a second Open in the same process is refused too.
func lock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
