// Command coordinator serves lock and election leases over gRPC.
//
// Every flag has an environment variable (see -help); a flag wins. With no
// configuration it serves on 127.0.0.1:7400 from the embedded memory store.
//
// `coordinator init-store` prepares a brand-new Redis, once, before the first
// coordinator starts on it (see coordinatord.InitStore); `coordinator
// -version` prints the version and VCS revision.
//
// It is a binary: a thin main over the coordinator process (coordinatord) and
// internal/app.
package main
