// Command coordctl is the coordinator's command-line client: it takes locks
// and leaderships around commands, and shows and manages leases.
//
//	coordctl [flags] lock NAME [-- CMD ARGS…]
//	coordctl [flags] elect ELECTION VALUE [-- CMD ARGS…]
//	coordctl [flags] leader ELECTION
//	coordctl [flags] observe ELECTION
//	coordctl [flags] describe NAME
//	coordctl [flags] list [PREFIX]
//	coordctl [flags] release NAME HOLDER TOKEN
//
// Exit status: 0 success; 1 not acquired, lost, not found, unreachable or
// failed; 2 bad usage; with CMD, CMD's own status when it ran to its end.
//
// It is a binary built on the SDK (client), the generated API and
// internal/app; it knows nothing of the server side.
package main
