//go:build !linux

package main

import "syscall"

// childAttr: elsewhere children stop when the bench stops them, or (echo,
// etcd) when their stdin closes.
func childAttr() *syscall.SysProcAttr { return nil }
