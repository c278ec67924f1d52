// Package statefile keeps small files that must survive a crash of the
// process or of the machine, in a directory that one process owns at a time.
//
// A write is atomic and durable when it returns, for one fsync: a file's
// content lives in two slot files (name.0, name.1) written in turn, each
// with a sequence number and a checksum. A write overwrites the older slot
// and syncs it, so after a crash a reader finds the newest slot that is
// whole: the new content, or the old one when the crash tore the write —
// never a mix, and never the old after Write returned. (A temporary file
// renamed into place would cost a second fsync, the directory's, on every
// write; the slots need it only when they are created.) Callers bound how
// often they write.
//
// The directory is locked (flock) while open, so that two processes cannot
// both believe they own the state: the second Open fails. The lock ends with
// the process, however it ends.
//
// It is a leaf, like every package in internal/: it imports nothing of this
// module.
package statefile
