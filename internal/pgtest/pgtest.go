// Package pgtest starts private PostgreSQL servers for tests, the way internal/redistest starts
// redis-server. It runs initdb into a temporary directory. It starts postgres on a free port of
// 127.0.0.1 in its own process group, with a parent-death signal, so it dies with the test
// binary. It stops it by its pid. Tests never use a server already running (the shared one on
// 5432).
//
// The binaries are Debian's (package postgresql: /usr/lib/postgresql/<version>/bin, the newest
// version found). Or they are in $CONVEYOR_PG_BIN's directory, or initdb and postgres on PATH.
// When they are absent, Start and Shared skip the test saying so; scripts/packages.sh installs
// them. PostgreSQL refuses to run as root. As root, the server runs as the user postgres (which
// Debian's package creates), and the directory is given to it.
//
// One server per test package, a database per test:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	url := pgtest.Shared(t).NewDatabase(t) // postgres://postgres@127.0.0.1:PORT/t_1?sslmode=disable
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// readyTimeout bounds how long a start waits for the server to accept connections.
	readyTimeout = 60 * time.Second
	// stopTimeout is how long Stop waits after SIGINT (fast shutdown) before SIGKILL.
	stopTimeout = 10 * time.Second
	// startAttempts is how many free ports a start tries.
	startAttempts = 4
)

// Server is one private postgres process.
type Server struct {
	Port int
	Dir  string // the temporary directory: data/, the socket and postgres.log

	cmd  *exec.Cmd
	done chan struct{} // closed once the postmaster was reaped
	dbs  atomic.Int64
	once sync.Once
}

var shared struct {
	sync.Mutex
	srv *Server
	err error
}

// Main runs the package's tests, then stops the shared server (if a test started it) and exits
// with the tests' code. A package that needs Redis too starts its servers with redistest.Start.
func Main(m *testing.M) {
	code := m.Run()
	shared.Lock()
	srv := shared.srv
	shared.srv = nil
	shared.Unlock()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

// Shared returns the package's server, started on first use; TestMain must call Main, which
// stops it. Tests sharing it isolate themselves with a database each (NewDatabase).
func Shared(tb testing.TB) *Server {
	tb.Helper()
	bin := binDir(tb)
	shared.Lock()
	defer shared.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = startProcess(bin)
	}
	if shared.err != nil {
		tb.Fatalf("pgtest: %v", shared.err)
	}
	return shared.srv
}

// Start starts a server of the test's own, stopped in tb.Cleanup. It skips the test when the
// binaries are absent and fails it when the server does not start.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := startProcess(binDir(tb))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartProcess is Start without a testing.TB, for a benchmark command; the caller calls Stop.
func StartProcess() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	return startProcess(bin)
}

// URL returns the URL of database db on the server, as the superuser postgres.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// NewDatabase creates an empty database of the test's own and returns its URL.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := "t_" + strconv.FormatInt(s.dbs.Add(1), 10)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return s.URL(name)
}

// PID returns the postmaster's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop shuts the server down (SIGINT to its process group: a fast shutdown; SIGKILL if it has
// not exited within 10 s) and removes its directory. It is idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		_ = os.RemoveAll(s.Dir)
	})
}

// binDir returns the directory of initdb and postgres, or skips the test.
func binDir(tb testing.TB) string {
	tb.Helper()
	bin, err := findBin()
	if err != nil {
		tb.Skipf("pgtest: %v", err)
	}
	return bin
}

// findBin looks for initdb and postgres: $CONVEYOR_PG_BIN, Debian's newest
// /usr/lib/postgresql/*/bin, then PATH.
func findBin() (string, error) {
	var dirs []string
	if d := os.Getenv("CONVEYOR_PG_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(debian, func(i, j int) bool { return version(debian[i]) > version(debian[j]) })
	dirs = append(dirs, debian...)
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL's initdb and postgres not found (in $CONVEYOR_PG_BIN, " +
		"/usr/lib/postgresql/*/bin or on PATH): apt-get install postgresql, or bash scripts/packages.sh")
}

// version is the major version of a /usr/lib/postgresql/<version>/bin directory.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// startProcess runs initdb into a new temporary directory and starts postgres on a free port.
func startProcess(bin string) (*Server, error) {
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-*")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			lastErr = err
			break
		}
		s := &Server{Port: port, Dir: dir}
		if lastErr = s.launch(bin, cred); lastErr == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// launch starts postgres and waits until it accepts a connection.
func (s *Server) launch(bin string, cred *syscall.Credential) error {
	log, err := os.OpenFile(filepath.Join(s.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer log.Close()
	// fsync off: the tests crash relays and Redis, never this server.
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", filepath.Join(s.Dir, "data"),
		"-p", strconv.Itoa(s.Port), "-k", s.Dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = sysProcAttr(cred)
	s.done = make(chan struct{})
	if err := startCmd(s.cmd); err != nil {
		return fmt.Errorf("pgtest: postgres: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
			return fmt.Errorf("pgtest: postgres exited: %s", lastLines(string(out), 5))
		case <-ctx.Done():
			s.Stop()
			return fmt.Errorf("pgtest: postgres did not accept connections within %s: %v", readyTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// credential is the user postgres runs as: nil (the current one) unless we are root, which
// PostgreSQL refuses; then the user postgres.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and PostgreSQL refuses root: no user postgres to run it as (%v)", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("pgtest: finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 5432 {
			return port, nil
		}
	}
	return 0, errors.New("pgtest: no free port")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
