// Package app is what the coordinator, coordctl and the housekeeper share as
// processes: loading TLS files, setting up logs, serving a metrics endpoint,
// and running until a signal asks them to stop. It holds no lease logic; the
// binaries in cmd/ compose it with the server, the stores or the SDK.
package app
