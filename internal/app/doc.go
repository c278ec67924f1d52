// Package app is what the coordinator, coordctl and the housekeeper share as
// processes: loading TLS files, setting up logs, serving a metrics endpoint,
// running until a signal asks them to stop, and the version -version prints.
// It holds no lease logic; the binaries in cmd/ and the coordinator process
// (coordinatord) compose it with the server, the stores or the SDK.
//
// Like everything in internal/ it is a leaf: it imports nothing of this
// module (LogConfig.Flags takes any StringFlags, such as an *envflag.Set).
package app
