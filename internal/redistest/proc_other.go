//go:build !unix

package redistest

import (
	"os"
	"os/exec"
	"syscall"
)

// sysProcAttr has nothing to set on this OS.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// terminate cannot deliver SIGTERM on this OS, so it kills.
func terminate(p *os.Process) error { return p.Kill() }

// kill kills the process at once.
func kill(p *os.Process) error { return p.Kill() }

// startCmd starts cmd.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
