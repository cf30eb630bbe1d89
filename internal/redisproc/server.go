// Package redisproc starts and signals redis-server processes by pid, for code that is not a
// test. The torture suite (internal/torture, `conveyor torture`) runs its own servers. The
// tests' helper internal/redistest starts its servers with the same pieces.
//
// Children are started in their own process group. On Linux they get a parent-death signal from
// a thread that never ends (StartCmd). So a redis-server dies with the process that started it,
// even when that process is SIGKILLed.
package redisproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// readyTimeout bounds how long a launch waits for the server to answer.
const readyTimeout = 10 * time.Second

// Server is one redis-server process on 127.0.0.1, in a directory of its own. The directory
// holds its log and, with appendonly on, its AOF. So Restart after Kill starts it again on the
// same port with the same data.
type Server struct {
	Addr string // "127.0.0.1:PORT"; the same across Restart
	Port int
	Dir  string

	args []string
	conf string // a Sentinel's config file content; "" for a data node

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been reaped
}

// Start starts redis-server on a free port with its working directory dir (created if
// needed) and the extra args (after the defaults, so they win: e.g. "--appendonly", "yes").
// The caller must call Stop.
func Start(dir string, args ...string) (*Server, error) {
	return start(dir, "", args)
}

// start starts a data node (conf empty) or a Sentinel whose config file starts as conf.
func start(dir, conf string, args []string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	s := &Server{Dir: dir, args: args, conf: conf}
	var last error
	for range 6 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.mu.Lock()
		last = s.launchLocked()
		s.mu.Unlock()
		if last == nil {
			return s, nil
		}
	}
	return nil, last
}

// PID is the running server's pid, 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Signal sends sig to the running server (by its recorded pid), e.g. SIGSTOP and SIGCONT.
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redisproc: server not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Kill SIGKILLs the server, as a crash would, and waits until it is reaped.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = Kill(s.cmd.Process)
	<-s.done
	s.cmd = nil
}

// Restart starts the server again on its port and directory (after Kill), retrying for a
// while if the port is briefly busy. With an AOF the data is what the AOF holds.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.launchLocked()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the server: SIGTERM, then SIGKILL after 5s. It keeps the directory.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped server cannot act on SIGTERM
	_ = Terminate(s.cmd.Process)
	select {
	case <-s.done:
		s.cmd = nil
	case <-time.After(5 * time.Second):
		s.killLocked()
	}
}

// launchLocked starts the process and waits until it answers with its own pid.
func (s *Server) launchLocked() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redisproc: redis-server not found on PATH: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(s.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	defer out.Close()
	var args []string
	if s.conf != "" {
		// A Sentinel rewrites its config file with what it learns (the current master, the
		// replicas, the other sentinels, its epoch): a restart keeps it.
		conf := filepath.Join(s.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(conf, []byte(s.conf), 0o600); err != nil {
				return fmt.Errorf("redisproc: %w", err)
			}
		}
		args = []string{conf, "--sentinel"}
	}
	args = append(args, []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--save", "",
		"--daemonize", "no",
		"--logfile", filepath.Join(s.Dir, "redis.log"),
		"--protected-mode", "no",
	}...)
	args = append(args, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = SysProcAttr()
	if err := StartCmd(cmd); err != nil {
		return fmt.Errorf("redisproc: starting redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redisproc: redis-server on port %d exited at start (%v); see %s", s.Port, cmd.ProcessState, s.Dir)
		default:
		}
		pid, err := ProbePID(s.Addr, nil)
		if err == nil && pid == cmd.Process.Pid {
			s.cmd, s.done = cmd, done
			return nil
		}
		if err == nil || time.Now().After(deadline) {
			_ = Kill(cmd.Process)
			<-done
			if err == nil {
				return fmt.Errorf("redisproc: another redis-server (pid %d) answers on %s", pid, s.Addr)
			}
			return fmt.Errorf("redisproc: redis-server on %s not ready after %v: %w", s.Addr, readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
