// Package limits caps what callers may hold in one coordinator: open streams
// and waiting calls, per client connection and in total, and leases per
// holder. A call over a cap fails at once with ResourceExhausted, naming the
// cap and its setting, and is counted in coordinator_limit_refusals_total;
// nothing else is disturbed.
//
// Every cap is per coordinator process: leases granted through another
// coordinator of the same store are not counted here.
//
// It is middleware: the process installs its interceptors around the service.
// Of this module it imports only the generated API and server/streamops (to
// count each stream operation like its unary call), never the service it
// wraps, a store or the process.
package limits
