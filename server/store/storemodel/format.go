package storemodel

import (
	"fmt"
	"strings"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// The answers as a trace prints them: times from the run's start, session
// ids by slot.

func (r *runner) at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + t.Sub(r.base).String()
}

func (r *runner) label(id string) string {
	if l, ok := r.labels[id]; ok {
		return l
	}
	return id
}

func (r *runner) lease(l store.Lease) string {
	if l.Holder == "" && l.Token == 0 {
		return "{}"
	}
	s := fmt.Sprintf("{%s %s #%d %d until %s ttl=%s", l.Name, l.Holder, l.Token, l.Weight, r.at(l.ExpiresAt), l.TTL)
	if l.Session != "" {
		s += " in " + r.label(l.Session)
	}
	if len(l.Value) > 0 {
		s += fmt.Sprintf(" %q", l.Value)
	}
	return s + "}"
}

func (r *runner) result(a store.AcquireResult) string {
	if a.Acquired {
		return "granted " + r.lease(a.Lease)
	}
	s := "refused"
	if a.Lease.Holder != "" {
		s += " by " + r.lease(a.Lease)
	}
	if !a.RetryAt.IsZero() {
		s += " retry at " + r.at(a.RetryAt)
	}
	return s
}

// fmt formats an answer.
func (r *runner) fmt(v any, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	switch v := v.(type) {
	case nil:
		return "ok"
	case store.AcquireResult:
		return r.result(v)
	case store.GroupResult:
		if v.Acquired {
			return "granted " + r.fmt(v.Leases, nil)
		}
		parts := make([]string, len(v.Members))
		for i, m := range v.Members {
			parts[i] = r.result(m)
		}
		s := "refused [" + strings.Join(parts, ", ") + "]"
		if len(v.Held) > 0 {
			s += " holding " + r.fmt(v.Held, nil)
		}
		return s
	case store.Lease:
		return r.lease(v)
	case []store.Lease:
		parts := make([]string, len(v))
		for i, l := range v {
			parts[i] = r.lease(l)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case store.ListPage:
		return fmt.Sprintf("%s next=%q", r.fmt(v.Leases, nil), v.Next)
	case store.Description:
		return fmt.Sprintf("held=%v capacity=%d last=%d waiters=%d/%d holders=%s", v.Held, v.Capacity, v.LastToken,
			v.Waiters, v.WaitingWeight, r.fmt(v.Holders, nil))
	case store.Session:
		return fmt.Sprintf("{%s owner=%q ttl=%s until %s}", r.label(v.ID), v.Owner, v.TTL, r.at(v.ExpiresAt))
	case store.SessionDescription:
		return fmt.Sprintf("%s names=%v", r.fmt(v.Session, nil), v.Names)
	}
	return fmt.Sprint(v)
}
