//go:build unix && !linux

package redisproc

import (
	"os"
	"os/exec"
	"syscall"
)

// SysProcAttr puts the server in its own process group (no parent-death
// signal outside Linux).
func SysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// Terminate asks the process group led by p to shut down.
func Terminate(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }

// Kill kills the process group led by p at once.
func Kill(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// StartCmd starts cmd.
func StartCmd(cmd *exec.Cmd) error { return cmd.Start() }
