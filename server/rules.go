package server

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// The limits of what a request may ask for, read from the FieldRules
// options of the proto (rules.proto): the proto is the one table of request
// limits, which clients in every language can read too. The validator
// applies these; rules_test.go checks every annotated field of every
// request against it.
var (
	MaxNameBytes   = int(fieldRules(&coordinatorv1.TryAcquireRequest{}, "name").GetMaxBytes())
	MaxHolderBytes = int(fieldRules(&coordinatorv1.TryAcquireRequest{}, "holder").GetMaxBytes())
	MinTTL         = millis(fieldRules(&coordinatorv1.TryAcquireRequest{}, "ttl").GetMinMillis())
	MaxWait        = millis(fieldRules(&coordinatorv1.TryAcquireRequest{}, "wait").GetMaxMillis())
	// MaxCapacity is the largest capacity of a name, and of a weight.
	MaxCapacity = int64(fieldRules(&coordinatorv1.TryAcquireRequest{}, "capacity").GetMaxValue())
	// MaxValueBytes bounds a proclaimed value: it is sent to every observer.
	MaxValueBytes = int(fieldRules(&coordinatorv1.CampaignRequest{}, "value").GetMaxBytes())
	// MaxPageSize is the largest List page; larger page sizes are lowered.
	MaxPageSize = int(fieldRules(&coordinatorv1.ListRequest{}, "page_size").GetMaxValue())
	// MaxStreamOperations is the most operations one Stream message may carry.
	MaxStreamOperations = int(fieldRules(&coordinatorv1.StreamRequest{}, "operations").GetMaxValue())
	// MaxTraceParentBytes and MaxTraceStateBytes bound the trace context a
	// stream operation may carry.
	MaxTraceParentBytes = int(fieldRules(&coordinatorv1.StreamOperation{}, "trace_parent").GetMaxBytes())
	MaxTraceStateBytes  = int(fieldRules(&coordinatorv1.StreamOperation{}, "trace_state").GetMaxBytes())
)

// FieldRules returns the rules of a field of a request message, nil when it
// has none.
func FieldRules(fd protoreflect.FieldDescriptor) *coordinatorv1.FieldRules {
	rules, _ := proto.GetExtension(fd.Options(), coordinatorv1.E_Rules).(*coordinatorv1.FieldRules)
	return rules
}

// fieldRules returns the rules of msg's field, which must have some: a
// limit missing from the proto is a build defect, caught at start-up.
func fieldRules(msg proto.Message, field protoreflect.Name) *coordinatorv1.FieldRules {
	fd := msg.ProtoReflect().Descriptor().Fields().ByName(field)
	if fd == nil {
		panic(fmt.Sprintf("%s has no field %s", msg.ProtoReflect().Descriptor().FullName(), field))
	}
	rules := FieldRules(fd)
	if rules == nil {
		panic(fmt.Sprintf("%s has no (coordinator.v1.rules) option", fd.FullName()))
	}
	return rules
}

func millis(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }
