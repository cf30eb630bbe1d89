//go:build linux

package pgtest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr puts postgres in its own process group (Stop signals the group) and makes the
// kernel SIGKILL it when the test binary dies.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

var (
	spawnOnce sync.Once
	spawnCh   chan func()
)

// startCmd starts cmd from one goroutine locked to its OS thread for the life of the process:
// Pdeathsig fires when the thread that started the child exits (redistest's reason).
func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked
			for f := range spawnCh {
				f()
			}
		}()
	})
	res := make(chan error, 1)
	spawnCh <- func() { res <- cmd.Start() }
	return <-res
}
