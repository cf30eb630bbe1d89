package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

const (
	// startAttempts is how many free ports StartProcess tries before giving up.
	startAttempts = 6
	// readyTimeout bounds how long one launch waits for the server to answer.
	readyTimeout = 10 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	stopTimeout = 5 * time.Second
	// restartTimeout bounds how long Restart retries while its port is busy.
	restartTimeout = 10 * time.Second
)

// errPortInUse marks launch failures caused by a port taken by someone else;
// they are retried.
var errPortInUse = errors.New("port already in use")

// config is the configuration a Server is (re)started with.
type config struct {
	args       []string // extra redis-server arguments (WithArgs)
	clusterBus bool     // pick a free cluster bus port and pass --cluster-port

	tls               *tlsSetup // listen with TLS only (StartTLS)
	requireClientCert bool      // --tls-auth-clients yes (RequireClientCert)

	sentinelConf string // run as a Sentinel with this config file content
}

// Option adjusts a server's configuration, e.g. WithArgs("--maxmemory", "10mb").
type Option func(*config)

// WithArgs appends command-line arguments to redis-server, after the
// defaults (so they override them), e.g. WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// withClusterBus makes the server use a separately chosen free cluster bus
// port, because the default (port+10000) may be above 65535 or taken.
func withClusterBus() Option {
	return func(c *config) { c.clusterBus = true }
}

// Server is one private redis-server process listening on 127.0.0.1.
//
// Its exported fields do not change over its life, not even across Restart.
type Server struct {
	Addr string // "127.0.0.1:PORT"
	Port int
	Dir  string // its working dir (holds redis.log)

	cfg     config
	busPort int    // cluster bus port, 0 unless cfg.clusterBus
	logPath string // Dir/redis.log
	outPath string // Dir/stdout.log (redis-server's stdout and stderr)

	mu      sync.Mutex
	proc    *process // nil when not running
	removed bool     // Dir was removed by Stop
}

// process is one run of redis-server; done is closed once it has been reaped.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a private standalone server for the test and stops it in
// tb.Cleanup. It fails the test (tb.Fatal) if the server cannot start.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := StartProcess(opts...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("redistest: %v", err)
		}
	})
	return s
}

// StartProcess is Start without a testing.TB, for TestMain or for commands
// such as a benchmark harness. The caller must call Stop.
func StartProcess(opts ...Option) (*Server, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.requireClientCert && cfg.tls == nil {
		return nil, errors.New("redistest: the RequireClientCert option needs StartTLS")
	}
	dir, err := os.MkdirTemp("", "redistest-*")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{
		Dir:     dir,
		cfg:     cfg,
		logPath: filepath.Join(dir, "redis.log"),
		outPath: filepath.Join(dir, "stdout.log"),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var lastErr error
	for range startAttempts {
		port, err := redisproc.FreePort()
		if err != nil {
			lastErr = err
			break
		}
		bus := 0
		if cfg.clusterBus {
			if bus, err = redisproc.FreePort(); err != nil {
				lastErr = err
				break
			}
			if bus == port {
				continue
			}
		}
		if lastErr = s.launch(port, bus); lastErr == nil {
			return s, nil
		}
		if !errors.Is(lastErr, errPortInUse) {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// URL returns the server's URL for database 0: "redis://127.0.0.1:PORT/0",
// or "rediss://127.0.0.1:PORT/0" for a TLS server (StartTLS).
func (s *Server) URL() string {
	if s.cfg.tls != nil {
		return "rediss://" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

// Client returns a new go-redis client to this server, closed in tb.Cleanup.
// For a TLS server (StartTLS) it trusts the test CA and presents the client
// certificate.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.options())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// options returns go-redis options for a client of this server.
func (s *Server) options() *redis.Options {
	o := &redis.Options{Addr: s.Addr}
	if s.cfg.tls != nil {
		o.TLSConfig = s.cfg.tls.client.Clone()
	}
	return o
}

// PID returns the process id of the running redis-server, or 0 if it is not
// running (after Stop or Kill).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop shuts the server down: SIGTERM, then SIGKILL if it has not exited
// within 5s. It then removes the server's temp dir. It is idempotent; a
// stopped server can be started again with Restart.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	if s.removed {
		return nil
	}
	s.removed = true
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("redistest: removing %s: %w", s.Dir, err)
	}
	return nil
}

// Kill kills the server with SIGKILL at once, simulating a crash, and waits
// until it is gone. It is idempotent. The temp dir is kept (for Restart);
// Stop removes it.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	p := s.proc
	s.proc = nil
	killProc(p)
	return nil
}

// Restart stops the server if it is running (as Stop, but keeping its dir),
// then starts it again on the same port with the same configuration. Data is
// not kept (persistence is off). It is meant for Redis-outage tests, usually
// after Kill. If the port is briefly taken by another process, Restart retries
// for up to 10s.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	if s.removed {
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
		s.removed = false
	}
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.launch(s.Port, s.busPort)
		if err == nil || !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopLocked terminates the running process, if any, and waits until it has
// been reaped. s.mu must be held.
func (s *Server) stopLocked() {
	if s.proc == nil {
		return
	}
	p := s.proc
	s.proc = nil
	select {
	case <-p.done:
		return
	default:
	}
	_ = redisproc.Terminate(p.cmd.Process)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		killProc(p)
	}
}

// killProc SIGKILLs p's process group and waits until p has been reaped.
func killProc(p *process) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = redisproc.Kill(p.cmd.Process)
	<-p.done
}

// launch starts redis-server on port (and cluster bus port bus, if not 0) and
// waits until it answers. On failure nothing is left running. s.mu must be
// held.
func (s *Server) launch(port, bus int) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redistest: redis-server not found on PATH: %w", err)
	}
	_ = os.Remove(s.logPath)
	out, err := os.Create(s.outPath)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	defer out.Close()

	var args []string
	if s.cfg.sentinelConf != "" {
		// Sentinel rewrites its config file: keep it across Kill/Restart,
		// write it anew after Stop removed the dir.
		conf := filepath.Join(s.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(conf, []byte(s.cfg.sentinelConf), 0o600); err != nil {
				return fmt.Errorf("redistest: %w", err)
			}
		}
		args = []string{conf, "--sentinel"}
	}
	if t := s.cfg.tls; t == nil {
		args = append(args, "--port", strconv.Itoa(port))
	} else {
		auth := "optional"
		if s.cfg.requireClientCert {
			auth = "yes"
		}
		args = append(args,
			"--port", "0", // no plain TCP
			"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", t.certFile,
			"--tls-key-file", t.keyFile,
			"--tls-ca-cert-file", t.caFile,
			"--tls-auth-clients", auth,
		)
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", s.logPath,
		"--protected-mode", "no",
	)
	if bus != 0 {
		args = append(args, "--cluster-port", strconv.Itoa(bus))
	}
	args = append(args, s.cfg.args...)

	cmd := exec.Command(bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = redisproc.SysProcAttr()
	if err := redisproc.StartCmd(cmd); err != nil {
		return fmt.Errorf("redistest: starting redis-server: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // always reap: no zombies
		close(p.done)
	}()

	s.busPort = bus
	if s.Port != port { // unchanged on Restart: no write racing with readers of Addr
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	if err := s.waitReady(p); err != nil {
		killProc(p)
		return err
	}
	s.proc = p
	return nil
}

// waitReady polls the server until it answers INFO with its own pid, it
// exits, or readyTimeout passes.
func (s *Server) waitReady(p *process) error {
	pid := p.cmd.Process.Pid
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.done:
			tail := s.logTail()
			if strings.Contains(tail, "in use") {
				return fmt.Errorf("redistest: redis-server on port %d: %w\n%s", s.Port, errPortInUse, tail)
			}
			return fmt.Errorf("redistest: redis-server on port %d exited early (%v)\n%s",
				s.Port, p.cmd.ProcessState, tail)
		default:
		}
		got, err := redisproc.ProbePID(s.Addr, s.cfg.tls.clientConfig())
		if err == nil {
			if got == pid {
				return nil
			}
			// Somebody else's server owns the port; ours will fail to bind.
			return fmt.Errorf("redistest: another redis-server (pid %d) answers on %s: %w", got, s.Addr, errPortInUse)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on %s not ready after %v: %v\n%s",
				s.Addr, readyTimeout, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logTail returns the last lines of redis.log and of redis-server's
// stdout/stderr, for error messages.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, path := range []string{s.logPath, s.outPath} {
		data, err := os.ReadFile(path)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		fmt.Fprintf(&b, "--- %s (tail) ---\n%s\n", filepath.Base(path), strings.Join(lines, "\n"))
	}
	return b.String()
}
