//go:build !unix

package app

import "time"

// processCPU cannot read the process's CPU time here: GovernProcs leaves
// GOMAXPROCS alone.
func processCPU() (time.Duration, bool) { return 0, false }
