// Package fanout delivers values published under a key to every subscriber of
// that key, without ever blocking the publisher.
//
// A subscriber is a buffered channel with an overflow policy that says what a
// full buffer means:
//   - Coalesce: the subscriber already has a value pending, so the new one is
//     dropped. Use it for "something changed, look again" signals.
//   - Evict: the subscriber fell behind and must not silently miss values, so
//     it is removed and its channel closed. Use it for event streams whose
//     reader resynchronises from the current state.
//   - Replace: the oldest pending value is dropped for the new one, so that a
//     buffer of one holds the latest. Use it for "something changed" signals
//     whose value says what changed last, when the last change subsumes the
//     ones before it.
//
// Close behaviour: Hub.Close closes every subscriber's channel; a Subscribe
// after Close returns a subscription whose channel is already closed, and a
// Publish after Close does nothing. Subscription.Cancel removes a subscriber
// and does not close its channel, so a reader selecting on it never sees a
// spurious zero value.
//
// It is a leaf, like every package in internal/: it imports nothing of this
// module.
package fanout
