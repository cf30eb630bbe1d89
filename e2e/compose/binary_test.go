package compose_test

// The compose test checks command lines against the real conveyor binary, built once from
// cmd/conveyor: its help says which commands and flags exist, their defaults and the variables
// they read ("env $NAME"); running a command line says whether the binary accepts it (a usage
// error is exit code 2, before anything connects).

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// conveyorBin is the binary built from this repository's cmd/conveyor for the test run.
var conveyorBin string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "conveyor-compose-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	conveyorBin = filepath.Join(dir, "conveyor")
	// Built in the workspace (go.work): the binary's module against the library in this tree, as
	// the Dockerfile builds it.
	build := exec.Command("go", "build", "-o", conveyorBin, "./cmd/conveyor")
	build.Dir = composeDir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build cmd/conveyor: %v\n", err)
		return 1
	}
	return m.Run()
}

// cliFlag is one flag as the binary's help shows it.
type cliFlag struct {
	name, def string // def: the help's "(default ...)", or ""
	env       string // the variable its help says it reads ("env $NAME"), or ""
}

// cliTree is what the binary's help says: the global flags and each top-level command's own.
type cliTree struct {
	global   map[string]cliFlag
	commands map[string]map[string]cliFlag
}

var (
	treeOnce sync.Once
	tree     *cliTree
	treeErr  error
)

// commandTree reads the binary's help, once.
func commandTree() (*cliTree, error) {
	treeOnce.Do(func() {
		root, err := helpText()
		if err != nil {
			treeErr = err
			return
		}
		sections := helpSections(root)
		tr := &cliTree{global: parseFlags(sections["Flags:"]), commands: map[string]map[string]cliFlag{}}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		for _, line := range sections["Available Commands:"] {
			if f := strings.Fields(line); len(f) > 0 {
				wg.Go(func() {
					text, err := helpText(f[0])
					mu.Lock()
					defer mu.Unlock()
					errs = append(errs, err)
					tr.commands[f[0]] = parseFlags(helpSections(text)["Flags:"])
				})
			}
		}
		wg.Wait()
		if treeErr = errors.Join(errs...); treeErr != nil {
			return
		}
		if len(tr.commands) == 0 || tr.global["redis"].env == "" {
			treeErr = fmt.Errorf("the help of %s lists no commands or no --redis variable:\n%s", conveyorBin, root)
			return
		}
		tree = tr
	})
	return tree, treeErr
}

func helpText(command ...string) (string, error) {
	out, err := exec.Command(conveyorBin, append(command, "--help")...).Output()
	if err != nil {
		return "", fmt.Errorf("conveyor %s --help: %w", strings.Join(command, " "), err)
	}
	return string(out), nil
}

// helpSections splits cobra's help into its sections ("Flags:", "Global Flags:", ...) by
// their heading lines.
func helpSections(help string) map[string][]string {
	out := map[string][]string{}
	section := ""
	for line := range strings.Lines(help) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
		case !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":"):
			section = line
		case !strings.HasPrefix(line, " "):
			section = ""
		default:
			out[section] = append(out[section], line)
		}
	}
	return out
}

var (
	flagLine   = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: [a-zA-Z0-9]+)?\s{2,}(.*)$`)
	flagEnv    = regexp.MustCompile(`\benv \$([A-Z0-9_]+)`)
	flagDefult = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
)

func parseFlags(lines []string) map[string]cliFlag {
	out := map[string]cliFlag{}
	for _, line := range lines {
		m := flagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := cliFlag{name: m[1]}
		if e := flagEnv.FindStringSubmatch(m[2]); e != nil {
			f.env = e[1]
		}
		if d := flagDefult.FindStringSubmatch(m[2]); d != nil {
			f.def = d[1]
		}
		out[f.name] = f
	}
	return out
}

// owner returns the command ("" for a global flag) and the flag that read the variable.
func (tr *cliTree) owner(name string) (command, flag string, ok bool) {
	for _, f := range tr.global {
		if f.env == name {
			return "", f.name, true
		}
	}
	cmds := slices.Sorted(func(yield func(string) bool) {
		for c := range tr.commands {
			if !yield(c) {
				return
			}
		}
	})
	for _, c := range cmds {
		for _, f := range tr.commands[c] {
			if f.env == name {
				return c, f.name, true
			}
		}
	}
	return "", "", false
}

// variables is every variable the binary's help names.
func (tr *cliTree) variables() []string {
	var out []string
	add := func(flags map[string]cliFlag) {
		for _, f := range flags {
			if f.env != "" && !slices.Contains(out, f.env) {
				out = append(out, f.env)
			}
		}
	}
	add(tr.global)
	for _, flags := range tr.commands {
		add(flags)
	}
	sort.Strings(out)
	return out
}

// invocation is one conveyor command line of a compose file, with the variables it runs with.
type invocation struct {
	tree *cliTree
	args []string
	env  map[string]string
	cmd  string // its top-level command; "" for the root
}

func newInvocation(tr *cliTree, args []string, env map[string]string) invocation {
	inv := invocation{tree: tr, args: args, env: env}
	for _, a := range args {
		if _, ok := tr.commands[a]; ok && !strings.HasPrefix(a, "-") {
			inv.cmd = a
			break
		}
	}
	return inv
}

// path is the command as the help names it: "conveyor worker".
func (inv invocation) path() string { return strings.TrimSpace("conveyor " + inv.cmd) }

// flagAt returns the index of the value of --name in args (--name v or --name=v), or -1.
func flagAt(args []string, name string) (int, bool) {
	for i, a := range args {
		if a == "--"+name {
			return i + 1, true
		}
		if strings.HasPrefix(a, "--"+name+"=") {
			return i, true
		}
	}
	return -1, false
}

func (inv invocation) given(name string) bool { _, ok := flagAt(inv.args, name); return ok }

func flagValue(args []string, name string) string {
	i, ok := flagAt(args, name)
	switch {
	case !ok || i >= len(args):
		return ""
	case strings.HasPrefix(args[i], "--"+name+"="):
		return strings.TrimPrefix(args[i], "--"+name+"=")
	default:
		return args[i]
	}
}

// lookup finds the flag the command sees: its own, else a global one.
func (inv invocation) lookup(name string) cliFlag {
	if f, ok := inv.tree.commands[inv.cmd][name]; ok {
		return f
	}
	return inv.tree.global[name]
}

// setting is the value the command runs with: the flag's, else its variable's, else the default.
func (inv invocation) setting(name string) string {
	if inv.given(name) {
		return flagValue(inv.args, name)
	}
	f := inv.lookup(name)
	if v := inv.env[f.env]; f.env != "" && v != "" {
		return v
	}
	return f.def
}

// redirect returns a copy of the invocation whose setting name the binary runs with is
// rewritten by to, on the command line if the flag is given there, else in its variable.
func (inv invocation) redirect(name string, to func(string) string) invocation {
	out := inv
	out.args = slices.Clone(inv.args)
	out.env = map[string]string{}
	for k, v := range inv.env {
		out.env[k] = v
	}
	if i, ok := flagAt(out.args, name); ok && i < len(out.args) {
		if strings.HasPrefix(out.args[i], "--"+name+"=") {
			out.args[i] = "--" + name + "=" + to(flagValue(inv.args, name))
		} else {
			out.args[i] = to(out.args[i])
		}
		return out
	}
	if f := inv.lookup(name); f.env != "" {
		out.env[f.env] = to(inv.setting(name))
	}
	return out
}

var (
	closedOnce sync.Once
	closedAddr string // a loopback port nothing listens on: the runs' Redis and probe target
)

func nowhere() string {
	closedOnce.Do(func() {
		closedAddr = "127.0.0.1:1"
		if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
			closedAddr = l.Addr().String()
			_ = l.Close()
		}
	})
	return closedAddr
}

// toNowhere points a URL at nowhere(), keeping the rest of it; a URL that does not parse is
// left for the binary to refuse.
func toNowhere(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	u.Host = nowhere()
	return u.String()
}

var runs sync.Map // the key of a run -> its usageError result, as compose loads repeat services

// usageError runs the command line and returns the binary's usage error (exit code 2, the
// message it printed), or nil once the command has started (its first log line, then SIGTERM
// stops it) or has exited otherwise. It never reaches a real server: Redis is a port where
// nothing listens, serve listens on a free port of the host it names, and a probe probes
// nowhere.
func (inv invocation) usageError() error {
	run := inv.redirect("redis", toNowhere)
	switch {
	case inv.cmd == "serve" && inv.given("probe"):
		run = run.redirect("probe", toNowhere)
	case inv.cmd == "serve":
		run = run.redirect("addr", func(addr string) string {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return addr
			}
			return net.JoinHostPort(host, "0")
		})
	}
	env := make([]string, 0, len(run.env))
	for k, v := range run.env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	key := strings.Join(run.args, "\x00") + "\x01" + strings.Join(env, "\x00")
	if v, ok := runs.Load(key); ok {
		err, _ := v.(error)
		return err
	}
	err := runOnce(run.args, env)
	runs.Store(key, err)
	return err
}

func runOnce(args, env []string) error {
	cmd := exec.Command(conveyorBin, args...)
	cmd.Env = env // nothing of this process's environment
	cmd.Dir = os.TempDir()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	first := make(chan string, 1)
	eof := make(chan struct{})
	var out strings.Builder // all of stderr, read once eof is closed
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		for n := 0; sc.Scan(); n++ {
			if n == 0 {
				first <- sc.Text()
			}
			out.WriteString(sc.Text() + "\n")
		}
	}()
	// A safety net only: every command either exits or logs at once.
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	select {
	case line := <-first:
		if strings.HasPrefix(line, "conveyor: ") {
			break // an error message: the exit code says whether it is a usage error
		}
		_ = cmd.Process.Signal(syscall.SIGTERM) // it started: the command line is accepted
	case <-eof:
	case <-deadline.C:
		_ = cmd.Process.Kill()
		<-eof
		_ = cmd.Wait()
		return fmt.Errorf("conveyor %s neither exited nor logged within 30s", strings.Join(args, " "))
	}
	select {
	case <-eof:
	case <-deadline.C:
		_ = cmd.Process.Kill()
		<-eof
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		msg, _, _ := strings.Cut(out.String(), "\nRun '")
		return errors.New(strings.TrimPrefix(strings.TrimSpace(msg), "conveyor: "))
	}
	return nil
}

// isLoopback reports whether host names the machine's own loopback, as serve decides it.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
