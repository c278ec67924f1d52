package storetest

import (
	"testing"
	"time"
)

func TestResourceCatchesWhatFencingForbids(t *testing.T) {
	valid := time.Now().Add(time.Minute)
	expired := time.Now().Add(-time.Millisecond)
	tests := []struct {
		name    string
		steps   func(r *Resource) error
		wantErr bool
	}{
		{"increasing tokens", func(r *Resource) error {
			_ = r.Enter("a", 1, valid)
			r.Leave("a")
			return r.Enter("b", 2, valid)
		}, false},
		{"same lease again", func(r *Resource) error {
			_ = r.Enter("a", 1, valid)
			return r.Enter("a", 1, valid)
		}, false},
		{"successor after expiry", func(r *Resource) error {
			_ = r.Enter("a", 1, expired)
			return r.Enter("b", 2, valid)
		}, false},
		{"stale token", func(r *Resource) error {
			_ = r.Enter("b", 2, valid)
			r.Leave("b")
			return r.Enter("a", 1, valid)
		}, true},
		{"one token, two holders", func(r *Resource) error {
			_ = r.Enter("a", 1, expired)
			return r.Enter("b", 1, valid)
		}, true},
		{"overlapping valid leases", func(r *Resource) error {
			_ = r.Enter("a", 1, valid)
			return r.Enter("b", 2, valid)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.steps(&Resource{}); (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}
