package statefile

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"strconv"
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

// Read returns the content last written to the file name; an error
// satisfying errors.Is(err, fs.ErrNotExist) when it was never written.
func (d *Dir) Read(name string) ([]byte, error) {
	_, data, err := d.newest(name)
	return data, err
}

// newest returns the slot holding name's newest whole content, and that
// content.
func (d *Dir) newest(name string) (slot, []byte, error) {
	var best slot
	var data []byte
	found := false
	for i := range 2 {
		raw, err := d.root.ReadFile(slotName(name, i))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return best, nil, fmt.Errorf("statefile: %w", err)
		}
		seq, body, ok := decodeSlot(raw)
		if ok && (!found || seq > best.seq) {
			best, data, found = slot{index: i, seq: seq}, body, true
		}
	}
	if !found {
		return best, nil, fmt.Errorf("statefile: %s in %s: %w", name, d.path, fs.ErrNotExist)
	}
	return best, data, nil
}

// slot is one of a file's two slot files and the sequence number it holds.
type slot struct {
	index int
	seq   uint64
}

func slotName(name string, i int) string { return name + "." + strconv.Itoa(i) }

// A slot is a header line, "statefile <seq> <crc32 of data> <len(data)>\n",
// then the data: a torn write fails the length or the checksum.
func encodeSlot(seq uint64, data []byte) []byte {
	header := fmt.Sprintf("statefile %d %08x %d\n", seq, crc32.ChecksumIEEE(data), len(data))
	return append([]byte(header), data...)
}

func decodeSlot(raw []byte) (seq uint64, data []byte, ok bool) {
	header, data, found := bytes.Cut(raw, []byte("\n"))
	if !found {
		return 0, nil, false
	}
	var sum uint32
	var n int
	if _, err := fmt.Sscanf(string(header), "statefile %d %08x %d", &seq, &sum, &n); err != nil {
		return 0, nil, false
	}
	if n != len(data) || crc32.ChecksumIEEE(data) != sum {
		return 0, nil, false
	}
	return seq, data, true
}

// Write replaces the content of the file name with data, durably: it
// overwrites the older slot and syncs it. Only one Write may run at a time
// (the lock makes this process the only writer).
func (d *Dir) Write(name string, data []byte) error {
	last, _, err := d.newest(name)
	next := slot{index: 0, seq: 1}
	switch {
	case err == nil:
		next = slot{index: 1 - last.index, seq: last.seq + 1}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	target := slotName(name, next.index)
	_, statErr := d.root.Stat(target)
	created := errors.Is(statErr, fs.ErrNotExist)
	if err := d.writeSynced(target, encodeSlot(next.seq, data)); err != nil {
		return err
	}
	if created {
		// A slot file that is new must also be in the directory after a
		// crash: once per slot, not per write.
		if err := d.syncDir(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dir) syncDir() error {
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
