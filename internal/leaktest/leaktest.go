// Package leaktest finds goroutines a test leaves behind, in place of go.uber.org/goleak. It
// keeps goleak's meaning: the goroutines of the testing package, of os/signal and of cgo
// syscalls are never leaks, and neither is the goroutine that looks. A leak is a goroutine
// still there when the look gives up.
//
// It waits longer than goleak (about half a second): goroutines that end on their own may take
// a while on a loaded machine. It looks again, with growing pauses, until the goroutines are
// gone or the deadline passes. The deadline is ten seconds, or less when the test binary's own
// deadline (go test -timeout) is nearer.
package leaktest

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wait is how long Verify and Main wait for goroutines to end at most.
const wait = 10 * time.Second

// Option is a goroutine that is not a leak.
type Option func(*opts)

type opts struct {
	ids   map[int]bool // goroutines alive when IgnoreCurrent was called
	funcs []string     // functions whose goroutines are not leaks
}

// IgnoreCurrent ignores the goroutines running now, as goleak.IgnoreCurrent does.
func IgnoreCurrent() Option {
	ids := map[int]bool{}
	for _, s := range stacks() {
		ids[s.id] = true
	}
	return func(o *opts) {
		for id := range ids {
			o.ids[id] = true
		}
	}
}

// IgnoreFunction ignores goroutines with fn anywhere on their stack (a function name as a
// stack trace prints it, such as "net/http.(*persistConn).readLoop"), as
// goleak.IgnoreAnyFunction does.
func IgnoreFunction(fn string) Option {
	return func(o *opts) { o.funcs = append(o.funcs, fn) }
}

// Verify fails t when goroutines other than those opts ignore are still running at its
// deadline.
func Verify(t testing.TB, opts ...Option) {
	t.Helper()
	deadline := time.Now().Add(wait)
	if d, ok := testDeadline(t); ok && d.Add(-time.Second).Before(deadline) {
		deadline = d.Add(-time.Second)
	}
	if err := find(deadline, opts); err != nil {
		t.Error(err)
	}
}

// testDeadline is the test binary's deadline, when t is a *testing.T that has one.
func testDeadline(t testing.TB) (time.Time, bool) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return d.Deadline()
	}
	return time.Time{}, false
}

// Main runs the tests of m, then, when they passed, fails the binary if goroutines other than
// those opts ignore outlive them, as goleak.VerifyTestMain does. It exits.
func Main(m *testing.M, opts ...Option) {
	code := m.Run()
	if code == 0 {
		if err := find(time.Now().Add(wait), opts); err != nil {
			fmt.Fprintf(os.Stderr, "leaktest: errors on a successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Find reports the goroutines that opts do not ignore, looking once.
func Find(opts ...Option) error { return find(time.Time{}, opts) }

func find(deadline time.Time, options []Option) error {
	o := &opts{ids: map[int]bool{}}
	for _, opt := range options {
		opt(o)
	}
	self := current()
	pause := time.Millisecond
	for {
		var leaked []stack
		for _, s := range stacks() {
			if s.id != self && !o.ignores(s) {
				leaked = append(leaked, s)
			}
		}
		if len(leaked) == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			var b strings.Builder
			for _, s := range leaked {
				fmt.Fprintf(&b, "goroutine %d in state %s, with %s on top of the stack:\n%s\n", s.id, s.state, s.first, s.text)
			}
			return fmt.Errorf("found unexpected goroutines:\n%s", b.String())
		}
		time.Sleep(min(pause, time.Until(deadline)))
		pause = min(2*pause, 100*time.Millisecond)
	}
}

func (o *opts) ignores(s stack) bool {
	if o.ids[s.id] || isTestStack(s) || isSyscallStack(s) || isStdLibStack(s) || s.has("runtime.ReadTrace") {
		return true
	}
	for _, fn := range o.funcs {
		if s.has(fn) {
			return true
		}
	}
	return false
}

// isTestStack: the testing package's goroutines that wait for tests (the main one, the
// parents of subtests, paused parallel tests, fuzzing).
func isTestStack(s stack) bool {
	switch s.first {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		return strings.HasPrefix(s.state, "chan receive")
	}
	return false
}

// isSyscallStack: cgo's goroutines in a system call.
func isSyscallStack(s stack) bool {
	return s.has("runtime.goexit") && strings.HasPrefix(s.state, "syscall")
}

// isStdLibStack: os/signal's goroutine, which importing or using it starts.
func isStdLibStack(s stack) bool {
	if s.first == "os/signal.signal_recv" || s.first == "os/signal.loop" {
		return true
	}
	return s.has("runtime.ensureSigM")
}

// stack is one goroutine of a runtime.Stack dump.
type stack struct {
	id    int
	state string          // "running", "chan receive", "select, 2 minutes", ...
	first string          // the function on top
	funcs map[string]bool // every function on the stack, not its creator
	text  string
}

func (s stack) has(fn string) bool { return s.funcs[fn] }

func current() int {
	if all := parse(dump(false)); len(all) > 0 {
		return all[0].id
	}
	return -1
}

func stacks() []stack { return parse(dump(true)) }

func dump(all bool) []byte {
	for n := 64 << 10; ; n *= 2 {
		buf := make([]byte, n)
		if m := runtime.Stack(buf, all); m < n {
			return buf[:m]
		}
	}
}

// parse reads a runtime.Stack dump: a header "goroutine 7 [chan receive]:", then a function
// line and a tab-indented file line per frame, and last "created by f in goroutine 1".
func parse(b []byte) []stack {
	var out []stack
	for block := range bytes.SplitSeq(b, []byte("\n\n")) {
		lines := strings.Split(strings.TrimSpace(string(block)), "\n")
		s, ok := parseHeader(lines[0])
		if !ok {
			continue
		}
		s.funcs = map[string]bool{}
		s.text = strings.Join(lines[1:], "\n")
		for _, l := range lines[1:] {
			if l == "" || l[0] == '\t' || strings.HasPrefix(l, "...") {
				continue // a file line, or "...additional frames elided..."
			}
			if strings.HasPrefix(l, "created by ") {
				break // the creator is another goroutine's frame
			}
			i := strings.LastIndexByte(l, '(')
			if i <= 0 {
				continue
			}
			fn := l[:i]
			s.funcs[fn] = true
			if s.first == "" {
				s.first = fn
			}
		}
		out = append(out, s)
	}
	return out
}

// parseHeader reads "goroutine 7 [chan receive, 2 minutes]:".
func parseHeader(line string) (stack, bool) {
	rest, ok := strings.CutPrefix(line, "goroutine ")
	if !ok {
		return stack{}, false
	}
	idText, rest, _ := strings.Cut(rest, " ")
	id, err := strconv.Atoi(idText)
	if err != nil {
		return stack{}, false
	}
	open, end := strings.IndexByte(rest, '['), strings.LastIndexByte(rest, ']')
	if open < 0 || end < open {
		return stack{}, false
	}
	return stack{id: id, state: rest[open+1 : end]}, true
}
