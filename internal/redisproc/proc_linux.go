//go:build linux

package redisproc

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// SysProcAttr puts the server in its own process group and makes the kernel
// SIGKILL it when the test binary dies.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Terminate asks the process group led by p to shut down.
func Terminate(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }

// Kill kills the process group led by p at once.
func Kill(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// spawnReq asks the spawner goroutine to start a command.
type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// StartCmd starts cmd from one goroutine locked to its OS thread for the
// life of the process. Pdeathsig fires when the thread that started the
// child exits, not the process; Go may end threads (a goroutine that exits
// while locked), so children are started from a thread that never ends.
func StartCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnCh {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, res: res}
	return <-res
}
