package main

import "syscall"

// childAttr makes a child die with the bench (SIGTERM when the bench's
// thread that started it exits), however the bench ends: killed, or a
// SIGPIPE on stdout.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
