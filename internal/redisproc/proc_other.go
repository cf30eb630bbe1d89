//go:build !unix

package redisproc

import (
	"os"
	"os/exec"
	"syscall"
)

// SysProcAttr has nothing to set on this OS.
func SysProcAttr() *syscall.SysProcAttr { return nil }

// Terminate cannot deliver SIGTERM on this OS, so it kills.
func Terminate(p *os.Process) error { return p.Kill() }

// Kill kills the process at once.
func Kill(p *os.Process) error { return p.Kill() }

// StartCmd starts cmd.
func StartCmd(cmd *exec.Cmd) error { return cmd.Start() }
