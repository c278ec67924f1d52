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

func TestWeightedResourceCatchesOverGrantAndStaleTokens(t *testing.T) {
	valid := time.Now().Add(time.Minute)
	expired := time.Now().Add(-time.Millisecond)
	tests := []struct {
		name    string
		steps   func(r *WeightedResource) error
		wantErr bool
	}{
		{"holders within the capacity", func(r *WeightedResource) error {
			_ = r.Enter("a", 1, 2, valid)
			return r.Enter("b", 2, 2, valid)
		}, false},
		{"tokens of shared holders in any order", func(r *WeightedResource) error {
			_ = r.Enter("b", 2, 1, valid)
			return r.Enter("a", 1, 1, valid)
		}, false},
		{"past the capacity", func(r *WeightedResource) error {
			_ = r.Enter("a", 1, 3, valid)
			return r.Enter("b", 2, 2, valid)
		}, true},
		{"an expired holder's weight is free", func(r *WeightedResource) error {
			_ = r.Enter("a", 1, 4, expired)
			return r.Enter("b", 2, 4, valid)
		}, false},
		{"a holder that left frees its weight", func(r *WeightedResource) error {
			_ = r.Enter("a", 1, 4, valid)
			r.Leave("a")
			return r.Enter("b", 2, 1, valid)
		}, false},
		{"a token below the last exclusive holder's", func(r *WeightedResource) error {
			_ = r.Enter("w", 5, 4, valid)
			r.Leave("w")
			return r.Enter("a", 3, 1, valid)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.steps(&WeightedResource{Capacity: 4}); (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}
