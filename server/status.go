package server

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/errinfo"
	"github.com/coordinator-dev/coordinator/server/store"
)

func errorInfo(reason coordinatorv1.ErrorReason, metadata map[string]string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason.String(), Domain: errinfo.Domain, Metadata: metadata}
}

func statusWithDetails(code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// errLeaseNotHeld is the error of a renewal refused by the store.
func errLeaseNotHeld(name string) error {
	return statusWithDetails(codes.FailedPrecondition, "lease on "+strconv.Quote(name)+" is not held by this holder and token",
		errorInfo(coordinatorv1.ErrorReason_LEASE_NOT_HELD, map[string]string{"name": name}))
}

// storeError maps an error of the store to a gRPC status error. Anything it
// does not recognise becomes Internal: never a wrong answer.
func storeError(err error) error {
	var quarantine *store.QuarantineError
	var capacity *store.CapacityError
	switch {
	case errors.As(err, &capacity):
		return statusWithDetails(codes.FailedPrecondition, capacity.Error(),
			errorInfo(coordinatorv1.ErrorReason_CAPACITY_MISMATCH, map[string]string{
				"name":      capacity.Name,
				"capacity":  strconv.FormatInt(capacity.Have, 10),
				"requested": strconv.FormatInt(capacity.Asked, 10),
			}))
	case errors.As(err, &quarantine):
		return statusWithDetails(codes.Unavailable, err.Error(),
			errorInfo(coordinatorv1.ErrorReason_DATA_LOSS_QUARANTINE, map[string]string{
				"retry_after": strconv.FormatInt(quarantine.RetryAfter.Milliseconds(), 10),
			}),
			&errdetails.RetryInfo{RetryDelay: durationpb.New(quarantine.RetryAfter)})
	// The caller's own deadline or cancel comes before "unavailable": a
	// store call cut short because the caller left says nothing about the
	// store, and must not be counted or logged as its failure. A store's own
	// call timeout is reported as store.ErrUnavailable alone.
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, store.ErrUnavailable):
		return statusWithDetails(codes.Unavailable, err.Error(),
			errorInfo(coordinatorv1.ErrorReason_STORE_UNAVAILABLE, nil))
	case errors.Is(err, store.ErrLeaseNotHeld):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
