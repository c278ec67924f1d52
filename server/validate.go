package server

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// fieldError is a request field that failed validation.
type fieldError struct {
	field, reason string
}

func (e *fieldError) Error() string { return e.field + ": " + e.reason }

// status is the InvalidArgument status naming the field, with the
// details a program can read: BadRequest and ErrorInfo INVALID_FIELD.
func (e *fieldError) status() *status.Status {
	st := status.New(codes.InvalidArgument, e.Error())
	withDetails, err := st.WithDetails(
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: e.field, Description: e.reason}}},
		errorInfo(coordinatorv1.ErrorReason_INVALID_FIELD, map[string]string{"field": e.field}),
	)
	if err != nil {
		return st
	}
	return withDetails
}

// validator collects the first invalid field of a request.
type validator struct {
	err *fieldError
}

func (v *validator) fail(field, format string, args ...any) {
	if v.err == nil {
		v.err = &fieldError{field: field, reason: fmt.Sprintf(format, args...)}
	}
}

// InvalidField is the InvalidArgument error of a request field that the
// handlers never see, e.g. one whose bytes could not be decoded: the same
// status and details as a field the validator refuses.
func InvalidField(field, reason string) error {
	return (&fieldError{field: field, reason: reason}).status().Err()
}

// Err returns the first failure as an InvalidArgument status error.
func (v *validator) Err() error {
	if v.err == nil {
		return nil
	}
	return v.err.status().Err()
}

func (v *validator) text(field, value string, maxBytes int) {
	if value == "" {
		v.fail(field, "is required")
		return
	}
	v.optionalText(field, value, maxBytes)
}

// optionalText checks a string that may be empty as text does one that
// must not.
func (v *validator) optionalText(field, value string, maxBytes int) {
	switch {
	case len(value) > maxBytes:
		v.fail(field, "is %d bytes long; at most %d are allowed", len(value), maxBytes)
	case !utf8.ValidString(value):
		v.fail(field, "is not valid UTF-8")
	default:
		for _, r := range value {
			if !unicode.IsPrint(r) {
				v.fail(field, "contains the unprintable character %U", r)
				return
			}
		}
	}
}

// name checks a lease or election name: 1 to 256 bytes of printable UTF-8,
// whose "/"-separated segments are neither empty nor "." or "..". "/" is
// reserved as the namespace separator, so that a prefix such as "team-a/"
// in an access file means exactly the names under it: "team-a//x" or
// "team-a/../b" would otherwise look like one namespace and mean another to
// whoever reads the name as a path.
func (v *validator) name(field, value string) {
	v.text(field, value, MaxNameBytes)
	if v.err == nil {
		v.segments(field, value, false)
	}
}

// prefix checks a List prefix: what name checks, except that it may be
// empty and its last segment may be unfinished ("team-a/" or "team-a/jo").
func (v *validator) prefix(field, value string) {
	if value == "" {
		return
	}
	v.text(field, value, MaxNameBytes)
	if v.err == nil {
		v.segments(field, value, true)
	}
}

// segments refuses empty, "." and ".." segments; with partial, the last
// segment may be empty or a dot or two (the start of a longer name).
func (v *validator) segments(field, value string, partial bool) {
	segs := strings.Split(value, "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		if partial && last {
			return
		}
		switch seg {
		case "":
			v.fail(field, "has an empty segment (a leading or trailing \"/\", or \"//\"): \"/\" only separates namespaces")
			return
		case ".", "..":
			v.fail(field, "has a %q segment: \"/\" separates namespaces and names are not paths", seg)
			return
		}
	}
}

// holder checks a holder or candidate identity: 1 to 128 bytes.
func (v *validator) holder(field, value string) { v.text(field, value, MaxHolderBytes) }

func (v *validator) token(field string, value uint64) {
	if value == 0 {
		v.fail(field, "is required (the token of the lease, never 0)")
	}
}

// duration checks that d is set (unless optional) and within [lo, hi].
func (v *validator) duration(field string, d *durationpb.Duration, lo, hi time.Duration, optional bool) time.Duration {
	if d == nil {
		if !optional {
			v.fail(field, "is required")
		}
		return 0
	}
	if err := d.CheckValid(); err != nil {
		v.fail(field, "is not a valid duration: %v", err)
		return 0
	}
	got := d.AsDuration()
	if got < lo || got > hi {
		v.fail(field, "is %s; it must be from %s to %s", got, lo, hi)
	}
	return got
}

func (v *validator) ttl(field string, d *durationpb.Duration, maxTTL time.Duration) time.Duration {
	return v.duration(field, d, MinTTL, maxTTL, false)
}

func (v *validator) wait(field string, d *durationpb.Duration) time.Duration {
	return v.duration(field, d, 0, MaxWait, true)
}

// share checks a request's capacity and weight, 0 meaning 1: the capacity at
// most MaxCapacity, the weight at most the capacity. It returns both.
func (v *validator) share(capacity, weight uint32) (int64, int64) {
	return v.shareOf("capacity", "weight", capacity, weight)
}

// shareOf is share of the fields named capacityField and weightField.
func (v *validator) shareOf(capacityField, weightField string, capacity, weight uint32) (int64, int64) {
	c, w := max(int64(capacity), 1), max(int64(weight), 1)
	if c > MaxCapacity {
		v.fail(capacityField, "is %d; at most %d is allowed", c, MaxCapacity)
		return c, w
	}
	if w > c {
		v.fail(weightField, "is %d; at most the capacity, %d, is allowed", w, c)
	}
	return c, w
}
