//go:build unix && !linux

package pgtest

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts postgres in its own process group, which Stop signals.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
