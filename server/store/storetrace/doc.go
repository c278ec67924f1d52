// Package storetrace traces store calls with OpenTelemetry: Wrap decorates
// a store.Store so that each call made on behalf of a traced request is a
// span, a child of the request's span, with the call's script, attempt and
// outcome.
//
// The spans are named "store SCRIPT" and carry:
//   - coordinator.store.script: the operation; for the Redis store, the Lua
//     script it runs (acquire, renew, release, dequeue, refresh_waiters,
//     describe, watch, session: the calls of store.Sessions, whose
//     operation coordinator.store.session_op names (create, renew, close,
//     describe); list and ping run plain commands), for the memory store the
//     operation of the same name, done under its mutex;
//   - coordinator.store.attempt: for a request whose context went through
//     CountAttempts, the how-manieth call of this script the request made
//     (1, then 2 and on for a waiting TryAcquire or Campaign trying again
//     as its turns come); absent otherwise;
//   - coordinator.store.outcome: acquired, not_acquired, renewed, released,
//     not_held, ok, or, when it failed, session_ended (the session is dead),
//     not_owned (another owner's session), quarantined, unavailable, canceled,
//     deadline_exceeded or error (the span's status is then Error for
//     quarantined, unavailable and error: what the caller did not ask for);
//   - coordinator.store.kind (redis or memory), coordinator.lease.name, and
//     coordinator.lease.token for a lease granted or renewed.
//
// Only calls whose context holds a recording span are traced: what the
// service does on its own (the health pings, the observers' batched reads,
// the waiters' queue refreshes) has no request to be part of, and would
// otherwise start a trace of its own every second. With tracing off the
// process does not wrap its store at all; a wrapped store whose callers are
// not sampled pays one check a call.
//
// Wrap embeds the store it wraps, so a method the interface gains is passed
// through untraced until it is added here.
//
// # Layering
//
// A store decorator, in the store implementations' layer: it imports the
// store interface and OpenTelemetry, never a store implementation or the
// service. The process (coordinatord) wraps the store it opened.
package storetrace
