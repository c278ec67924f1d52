package client

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// The timings and limits this SDK shares with the Python and TypeScript
// clients are not written here: they are read from the proto, the one
// source all three read. The Coordinator service's
// (coordinator.v1.client_rules) option (rules.proto) gives the timings, the
// FieldRules of the request fields give the request limits, and the
// ErrorReason values marked (coordinator.v1.ends_lease) are the reasons
// that end a lease. rules_test.go compares what the SDK does with them.

// clientRules is the Coordinator service's (coordinator.v1.client_rules)
// option.
var clientRules = readClientRules()

// DefaultTTL is the TTL of sessions, and so of the leases held in them,
// when neither New nor NewSession is given WithTTL:
// ClientRules.default_ttl_millis (15s). It is read from the proto and is
// not meant to be changed.
var DefaultTTL = millis(clientRules.GetDefaultTtlMillis())

// DefaultCloseTimeout bounds how long Close spends releasing the leases the
// Client still holds: ClientRules.close_timeout_millis (2s). It is read from
// the proto and is not meant to be changed.
var DefaultCloseTimeout = millis(clientRules.GetCloseTimeoutMillis())

var (
	// maxWait is the longest wait the coordinator accepts in one call.
	maxWait = millis(fieldRules(&coordinatorv1.TryAcquireRequest{}, "wait").GetMaxMillis())
	// maxIdentityBytes leaves room in a holder for the per-acquisition
	// suffix ("#" and a sequence number).
	maxIdentityBytes = int(fieldRules(&coordinatorv1.TryAcquireRequest{}, "holder").GetMaxBytes()) - int(clientRules.GetHolderSuffixBytes())

	// answerMargin is how long before the caller's deadline a wait asks the
	// coordinator to answer, so that its not-acquired answer, which names
	// the holder, arrives before the deadline even on a loaded machine. The
	// price: a lock freed in the last answerMargin of a wait goes to the
	// next waiter.
	answerMargin = millis(clientRules.GetAnswerMarginMillis())

	// The delays between the retries of a call or a stream, and the
	// fraction by which every retry delay is moved up or down.
	retryMin    = millis(clientRules.GetRetryMinMillis())
	retryMax    = millis(clientRules.GetRetryMaxMillis())
	retryJitter = float64(clientRules.GetRetryJitterPercent()) / 100

	// A session is renewed every TTL/renewalsPerTTL, moved up or down by up
	// to renewalJitterPercent.
	renewalsPerTTL       = time.Duration(clientRules.GetRenewalsPerTtl())
	renewalJitterPercent = time.Duration(clientRules.GetRenewalJitterPercent())

	// A failed renewal is retried from renewalRetryMinPercent of the TTL,
	// doubling, to renewalRetryMaxPercent of it, never below
	// renewalRetryFloor.
	renewalRetryMinPercent = time.Duration(clientRules.GetRenewalRetryMinPercent())
	renewalRetryMaxPercent = time.Duration(clientRules.GetRenewalRetryMaxPercent())
	renewalRetryFloor      = millis(clientRules.GetRenewalRetryFloorMillis())

	// The margin kept from a session's validity: validityMarginPercent of the
	// TTL, at least validityMarginMin, at most validityMarginMaxPercent of
	// the TTL.
	validityMarginPercent    = time.Duration(clientRules.GetValidityMarginPercent())
	validityMarginMin        = millis(clientRules.GetValidityMarginMinMillis())
	validityMarginMaxPercent = time.Duration(clientRules.GetValidityMarginMaxPercent())

	// RunAsLeader's pause before campaigning again after fn returned
	// early (within leaderEarlyReturn of the election) while leader.
	leaderEarlyReturn = millis(clientRules.GetLeaderEarlyReturnMillis())
	leaderRetryMin    = millis(clientRules.GetLeaderRetryMinMillis())
	leaderRetryMax    = millis(clientRules.GetLeaderRetryMaxMillis())
	// leaderCampaignsAgain: RunAsLeader campaigns again after each term,
	// until stopped, rather than once.
	leaderCampaignsAgain = clientRules.GetLeaderCampaignsAgain()

	// transientCodes are the codes after which a call may succeed when
	// tried again, and outcomeUnknownCodes those after which it may have
	// changed state on the coordinator without its caller hearing of it.
	transientCodes      = codeSet(clientRules.GetTransientCodes())
	outcomeUnknownCodes = codeSet(clientRules.GetOutcomeUnknownCodes())
	// errorDomain is the google.rpc.ErrorInfo domain of the coordinator's
	// errors.
	errorDomain = clientRules.GetErrorDomain()

	// leaseEndingReasons are the ErrorReason names marked
	// (coordinator.v1.ends_lease): a renewal refused with one of them
	// means the lease is gone for good.
	leaseEndingReasons = readLeaseEndingReasons()
)

// endsLease reports whether a renewal refused with the ErrorInfo reason
// means that the lease is gone for good.
func endsLease(reason string) bool { return leaseEndingReasons[reason] }

// readClientRules returns the Coordinator service's ClientRules. A proto
// without them is a build defect, caught when the package loads.
func readClientRules() *coordinatorv1.ClientRules {
	sd := coordinatorv1.File_coordinator_v1_coordinator_proto.Services().ByName("Coordinator")
	if sd == nil || !proto.HasExtension(sd.Options(), coordinatorv1.E_ClientRules) {
		panic("coordinator.v1.Coordinator has no (coordinator.v1.client_rules) option")
	}
	return proto.GetExtension(sd.Options(), coordinatorv1.E_ClientRules).(*coordinatorv1.ClientRules)
}

// fieldRules returns the rules of msg's field, which must have some.
func fieldRules(msg proto.Message, field protoreflect.Name) *coordinatorv1.FieldRules {
	fd := msg.ProtoReflect().Descriptor().Fields().ByName(field)
	if fd == nil || !proto.HasExtension(fd.Options(), coordinatorv1.E_Rules) {
		panic(fmt.Sprintf("%s.%s has no (coordinator.v1.rules) option", msg.ProtoReflect().Descriptor().FullName(), field))
	}
	return proto.GetExtension(fd.Options(), coordinatorv1.E_Rules).(*coordinatorv1.FieldRules)
}

func readLeaseEndingReasons() map[string]bool {
	reasons := map[string]bool{}
	values := coordinatorv1.ErrorReason(0).Descriptor().Values()
	for i := range values.Len() {
		v := values.Get(i)
		if ends, _ := proto.GetExtension(v.Options(), coordinatorv1.E_EndsLease).(bool); ends {
			reasons[string(v.Name())] = true
		}
	}
	return reasons
}

// codeSet is the set of gRPC codes of the google.rpc.Code values list:
// the two enums number the codes alike.
func codeSet(list []code.Code) map[codes.Code]bool {
	set := make(map[codes.Code]bool, len(list))
	for _, c := range list {
		set[codes.Code(c)] = true
	}
	return set
}

func millis(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }
