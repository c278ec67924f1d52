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
}

// TestATornWriteLeavesThePreviousContent stands for a crash in the middle
// of a write: the slot being written is cut short or garbled, and a reader
// must find the content written before it, never a mix.
func TestATornWriteLeavesThePreviousContent(t *testing.T) {
	tests := []struct {
		name string
		tear func(b []byte) []byte
	}{
		{"cut short", func(b []byte) []byte { return b[:len(b)-3] }},
		{"garbled", func(b []byte) []byte { c := append([]byte(nil), b...); c[len(c)-1] ^= 0xff; return c }},
		{"empty", func([]byte) []byte { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := statefile.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = d.Close() }()
			for _, content := range []string{"one", "two", "three"} {
				if err := d.Write("bounds", []byte(content)); err != nil {
					t.Fatal(err)
				}
			}
			// "three" went to slot 0 (writes alternate 0, 1, 0).
			newest := filepath.Join(d.Path(), "bounds.0")
			raw, err := os.ReadFile(newest)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(newest, tt.tear(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			if got, err := d.Read("bounds"); err != nil || string(got) != "two" {
				t.Fatalf("after a torn write, Read = %q, %v; want the previous content %q", got, err, "two")
			}
			// The next write goes over the torn slot, and wins.
			if err := d.Write("bounds", []byte("four")); err != nil {
				t.Fatal(err)
			}
			if got, err := d.Read("bounds"); err != nil || string(got) != "four" {
				t.Fatalf("Read = %q, %v; want %q", got, err, "four")
			}
		})
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
