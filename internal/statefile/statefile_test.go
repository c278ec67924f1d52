package statefile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/coordinator-dev/coordinator/internal/statefile"
)

func TestWriteReplacesAndReadReturnsTheLastWrite(t *testing.T) {
	d, err := statefile.Open(filepath.Join(t.TempDir(), "nested", "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	if _, err := d.Read("bounds"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read before any write: %v; want fs.ErrNotExist", err)
	}
	for _, content := range []string{"first, and longer", "second"} {
		if err := d.Write("bounds", []byte(content)); err != nil {
			t.Fatal(err)
		}
		if got, err := d.Read("bounds"); err != nil || string(got) != content {
			t.Fatalf("Read = %q, %v; want %q", got, err, content)
		}
	}
	if _, err := os.Stat(filepath.Join(d.Path(), "bounds.tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
}

func TestASecondOpenOfALockedDirFails(t *testing.T) {
	path := t.TempDir()
	first, err := statefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := statefile.Open(path); !errors.Is(err, statefile.ErrLocked) {
		if second != nil {
			_ = second.Close()
		}
		t.Fatalf("second Open: %v; want ErrLocked", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := statefile.Open(path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	_ = again.Close()
}
