// Package statefile keeps small files that must survive a crash of the
// process or of the machine, in a directory that one process owns at a time.
//
// A write is atomic and durable when it returns: the data goes to a
// temporary file that is synced, renamed over the old file, and the
// directory is synced, so that after a crash a reader finds either the old
// content or the new, never a mix, and never the old after Write returned.
// Each Write costs two fsyncs; callers bound how often they write.
//
// The directory is locked (flock) while open, so that two processes cannot
// both believe they own the state: the second Open fails. The lock ends with
// the process, however it ends.
package statefile

import (
	"errors"
	"fmt"
	"os"
)

// lockName is the lock file's name in the directory.
const lockName = "lock"

// ErrLocked reports a directory that another open Dir holds (in this process
// or another).
var ErrLocked = errors.New("state directory is in use")

// Dir is an open, locked state directory.
type Dir struct {
	path string
	// root confines every name to the directory.
	root *os.Root
	lock *os.File
}

// Open creates the directory if needed and locks it.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("statefile: create %s: %w", path, err)
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("statefile: %w", err)
	}
	f, err := root.OpenFile(lockName, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("statefile: open lock of %s: %w", path, err)
	}
	if err := lock(f); err != nil {
		_ = f.Close()
		_ = root.Close()
		return nil, fmt.Errorf("statefile: lock %s: %w", path, err)
	}
	return &Dir{path: path, root: root, lock: f}, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// Read returns the content of the file name; an error satisfying
// errors.Is(err, fs.ErrNotExist) when it was never written.
func (d *Dir) Read(name string) ([]byte, error) {
	b, err := d.root.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("statefile: %w", err)
	}
	return b, nil
}

// Write replaces the content of the file name with data, durably. Only one
// Write may run at a time.
func (d *Dir) Write(name string, data []byte) error {
	// One temporary name is enough: the lock makes this the only writer.
	tmp := name + ".tmp"
	if err := d.writeSynced(tmp, data); err != nil {
		return err
	}
	if err := d.root.Rename(tmp, name); err != nil {
		return fmt.Errorf("statefile: %w", err)
	}
	// Without this the rename may be lost in a crash, bringing back the old
	// content after Write reported success.
	dir, err := d.root.Open(".")
	if err != nil {
		return fmt.Errorf("statefile: %w", err)
	}
	err = dir.Sync()
	if cerr := dir.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("statefile: sync %s: %w", d.path, err)
	}
	return nil
}

func (d *Dir) writeSynced(name string, data []byte) error {
	f, err := d.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("statefile: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("statefile: write %s: %w", name, err)
	}
	return nil
}

// Close unlocks the directory.
func (d *Dir) Close() error {
	err := errors.Join(d.lock.Close(), d.root.Close())
	if err != nil {
		return fmt.Errorf("statefile: unlock %s: %w", d.path, err)
	}
	return nil
}
