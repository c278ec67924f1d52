package housekeeper

import (
	"encoding/json"
	"fmt"
	"slices"
)

// View is one agreed membership of the housekeeper instances: who is in, and
// the fencing token every batch worked under it carries. Each queue's tasks
// belong to exactly one member of a view (Owner), so instances holding the
// same view never work the same queue and task, and a newer view (higher
// Token) fences off every batch of an older one at the queue's fence.
type View struct {
	// Token is a fencing token from the coordinator, strictly increasing
	// from view to view for ever; 0 is no view.
	Token uint64 `json:"token"`
	// Members are the instance ids, sorted, without duplicates.
	Members []string `json:"members"`
}

// NewView returns the view of members (in any order) under token.
func NewView(token uint64, members []string) View {
	m := slices.Clone(members)
	slices.Sort(m)
	return View{Token: token, Members: slices.Compact(m)}
}

// Has reports whether id is a member of v.
func (v View) Has(id string) bool {
	_, ok := slices.BinarySearch(v.Members, id)
	return ok
}

// Owner is the member that works t on queue, by rendezvous hashing: each
// member scores hash(member, task, queue), the highest score owns it. A
// member's arrival or departure therefore moves only the queues it takes or
// leaves, about 1/len(Members) of them, and every instance computes the
// same owner from the same view without talking to the others. Empty when
// the view has no member.
func (v View) Owner(t task, queue string) string {
	var owner string
	var best uint64
	for _, m := range v.Members {
		if s := rendezvous(m, t, queue); owner == "" || s > best {
			owner, best = m, s
		}
	}
	return owner
}

// rendezvous scores member for (t, queue): FNV-1a over the three strings with
// separators that cannot occur in a queue name's hash tag, then the
// SplitMix64 finalizer so that names differing in a last byte spread over
// the whole range.
func rendezvous(member string, t task, queue string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, s := range [...]string{member, "{", string(t), "}", queue} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= prime
		}
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// Encode is v as the leader proclaims it in the election: JSON, so that
// grpcurl users can read it (base64-decoded).
func (v View) Encode() []byte {
	b, _ := json.Marshal(v) // a struct of a uint64 and strings always marshals
	return b
}

// DecodeView reads a proclaimed view. A value that is not one (a
// candidate's empty campaign value) is an error, and a Token of 0 is none.
func DecodeView(b []byte) (View, error) {
	var v View
	if err := json.Unmarshal(b, &v); err != nil {
		return View{}, fmt.Errorf("housekeeper: not a view: %w", err)
	}
	if v.Token == 0 {
		return View{}, fmt.Errorf("housekeeper: view without a token")
	}
	return NewView(v.Token, v.Members), nil
}
