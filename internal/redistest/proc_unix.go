//go:build unix && !linux

package redistest

import (
	"os"
	"os/exec"
	"syscall"
)

// sysProcAttr puts the server in its own process group (no parent-death
// signal outside Linux).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// terminate asks the process group led by p to shut down.
func terminate(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }

// kill kills the process group led by p at once.
func kill(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// startCmd starts cmd.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
