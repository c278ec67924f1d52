// Package backoff is the project's one retry delay: exponential from Min,
// doubling per attempt up to Max, with ±20 % jitter (or the fraction given to
// NewWithJitter) so that many clients that failed together do not retry
// together. It is go-grpc-middleware's bounded exponential backoff with an
// attempt counter attached.
//
// It is a leaf, like every package in internal/: it imports nothing of this
// module.
package backoff
