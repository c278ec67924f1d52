// Package envflag defines command-line flags whose defaults come from
// environment variables, so that every setting of a binary can be given
// either way, a flag winning, and -help names the variable of each flag.
//
// It is a leaf, like every package in internal/: it imports nothing of this
// module.
package envflag
