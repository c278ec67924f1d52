// Package principal carries the identity of a call's credential from the
// access middleware, which authenticates it, to the service, which makes
// it the owner of the sessions the call creates: a session id is a
// capability of the credential that created it. Neither imports the other;
// both import this.
//
// It is a leaf of the server layer: it imports nothing of this module.
package principal

import "context"

type key struct{}

// With returns ctx carrying the caller's principal: a stable, printable
// name of its credential that reveals nothing of a secret (for a bearer
// token, a digest of it).
func With(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, key{}, name)
}

// Of is the principal of ctx's caller; empty without authentication, when
// every caller has the same one.
func Of(ctx context.Context) string {
	name, _ := ctx.Value(key{}).(string)
	return name
}
