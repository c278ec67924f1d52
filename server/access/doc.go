// Package access decides which names a caller may use. An access file grants
// credentials name prefixes, one rule a line:
//
//	# credential        prefixes it may use
//	s3cret-token-a      team-a/ shared/
//	cert:billing-svc    billing/
//	ops-token           *
//
// A credential is a bearer token (sent as 'authorization: Bearer TOKEN'), or
// "cert:" followed by the Common Name of a client certificate that the
// server's client CA verified (mTLS). A prefix is a plain string prefix of a
// name ("team-a/" covers "team-a/x" but not "team-ab"); "*" means every name.
// A word starting with "#" starts a comment. A call with no known credential
// is Unauthenticated; a call on a name outside its credential's prefixes is
// PermissionDenied.
//
// Sessions (CreateSession and the calls on a session) name no lease: any
// known credential may make them. Authenticate puts the caller's principal
// (server/principal: a digest of its token, or its certificate's name) in
// the call's context, and the service makes it the owner of the sessions
// the call creates, so that a session id is a capability of the credential
// that created it: another credential's calls on it are PermissionDenied.
//
// What it does not do: rules apply to each call as it starts and to every
// operation of an operation stream, so a reload takes effect at once
// for new calls, renewals and stream operations, but an Observe stream
// already open keeps running until it ends.
//
// It is middleware: the process installs its interceptors around the service.
// Of this module it imports only the generated API and server/errinfo (the
// domain its errors carry), never the service it wraps, a store or the
// process.
package access
