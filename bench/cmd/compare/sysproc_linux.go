package main

import "syscall"

// childSysProcAttr makes a consumer child die with the parent, so an interrupted run leaves no
// consumer behind.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
