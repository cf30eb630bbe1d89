package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The consumer child talks to the parent with lines on stdout that start with protoPrefix. After
// DONE it keeps running until its stdin closes, so the parent can read its /proc entries. Then
// it stops its consumer and exits. Anything else it prints goes to stderr. The lines are:
//
//	@@bench READY {"ready_ns":...}
//	@@bench DONE {"done_ns":...,"handled":...,"processed":...,"lateness_ms":[...]}
const protoPrefix = "@@bench "

type readyMsg struct {
	ReadyNS int64 `json:"ready_ns"`
}

type doneMsg struct {
	DoneNS     int64     `json:"done_ns"`
	Handled    int64     `json:"handled"` // handler invocations
	LatenessMS []float64 `json:"lateness_ms,omitempty"`
	// FromSendMS are the open-loop jobs' start times minus their actual send times.
	FromSendMS []float64 `json:"from_send_ms,omitempty"`
}

// duePrefix starts the payload of a delayed job: "due=<unix ns>;" then padding.
const duePrefix = "due="

func makePayload(size int) []byte {
	return bytes.Repeat([]byte{'x'}, size)
}

func makeDuePayload(due time.Time, size int) []byte {
	p := fmt.Appendf(nil, "%s%d;", duePrefix, due.UnixNano())
	for len(p) < size {
		p = append(p, 'x')
	}
	return p
}

func parseDue(p []byte) (time.Time, bool) {
	if !bytes.HasPrefix(p, []byte(duePrefix)) {
		return time.Time{}, false
	}
	return parseStamp(p[len(duePrefix):])
}

// parseStamp reads the "<unix ns>;" that starts rest.
func parseStamp(rest []byte) (time.Time, bool) {
	end := bytes.IndexByte(rest, ';')
	if end < 0 {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func emit(kind string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(os.Stdout, "%s%s %s\n", protoPrefix, kind, b)
}

// runChild is the consumer process: it consumes o.queue with variant o.system until o.expect
// jobs are processed, reports, and waits for its stdin to close.
func runChild(o options) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "consumer %s: "+format+"\n", append([]any{o.system}, args...)...)
		return 1
	}
	sys, err := newSystem(o.system, o)
	if err != nil {
		return fail("%v", err)
	}
	cons, err := sys.NewConsumer(o.addr, o.queue)
	if err != nil {
		return fail("%v", err)
	}

	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()

	var handled atomic.Int64
	reached := make(chan struct{})
	var latMu sync.Mutex
	var lateness, fromSend []float64
	expect := int64(o.expect)
	handle := func(p []byte) {
		if due, ok := parseDue(p); ok {
			now := time.Now()
			sent, hasSent := parseSent(p)
			latMu.Lock()
			lateness = append(lateness, float64(now.Sub(due))/float64(time.Millisecond))
			if hasSent {
				fromSend = append(fromSend, float64(now.Sub(sent))/float64(time.Millisecond))
			}
			latMu.Unlock()
		}
		if handled.Add(1) == expect {
			close(reached)
		}
	}

	if expect <= 0 {
		close(reached)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := cons.Start(ctx, handle); err != nil {
		return fail("start: %v", err)
	}
	emit("READY", readyMsg{ReadyNS: time.Now().UnixNano()})

	stop := func() {
		done := make(chan error, 1)
		go func() { done <- cons.Stop() }()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "consumer %s: stop: %v\n", o.system, err)
			}
		case <-time.After(15 * time.Second):
			fmt.Fprintf(os.Stderr, "consumer %s: stop did not return within 15s\n", o.system)
		}
	}
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	status := func() string {
		return fmt.Sprintf("handled=%d/%d %s", handled.Load(), expect, cons.Describe(ctx))
	}

	// Wait until the handlers saw every job, then until the system reports them finished.
wait:
	for {
		select {
		case <-reached:
			break wait
		case <-progress.C:
			fmt.Fprintf(os.Stderr, "consumer %s: progress: %s\n", o.system, status())
		case <-stdinClosed:
			fmt.Fprintf(os.Stderr, "consumer %s: told to stop before done: %s\n", o.system, status())
			stop()
			return 1
		}
	}
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for {
		n, err := cons.Processed(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "consumer %s: processed: %v\n", o.system, err)
		}
		if n >= expect {
			break
		}
		select {
		case <-poll.C:
		case <-progress.C:
			fmt.Fprintf(os.Stderr, "consumer %s: progress (waiting for completion): processed=%d %s\n", o.system, n, status())
		case <-stdinClosed:
			fmt.Fprintf(os.Stderr, "consumer %s: told to stop before done: processed=%d %s\n", o.system, n, status())
			stop()
			return 1
		}
	}
	doneAt := time.Now()
	latMu.Lock()
	lat, fs := slices.Clone(lateness), slices.Clone(fromSend)
	latMu.Unlock()
	emit("DONE", doneMsg{DoneNS: doneAt.UnixNano(), Handled: handled.Load(), LatenessMS: lat, FromSendMS: fs})
	<-stdinClosed
	stop()
	return 0
}

// child is the parent's handle on a consumer process.
type child struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string // protocol lines
	stderr  *tailBuffer
	exited  chan struct{}
	waitMu  sync.Mutex
	waitErr error
}

// startChild starts a consumer process for variant v reading queue, expecting n jobs.
func startChild(o options, v string, addr, queue string, n int) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	args := []string{
		"-role", "consume", "-system", v, "-redis", addr, "-queue", queue, "-expect", strconv.Itoa(n),
		"-conveyor-concurrency", strconv.Itoa(o.convConc), "-conveyor-batch", strconv.Itoa(o.convBatch),
	}
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = childSysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &child{
		name:   v,
		cmd:    cmd,
		stdin:  stdin,
		lines:  make(chan string, 4),
		stderr: &tailBuffer{max: 8 << 10, echo: os.Stderr, prefix: "[consumer " + v + "] "},
		exited: make(chan struct{}),
	}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start consumer %s: %w", v, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, protoPrefix); ok {
				c.lines <- rest
			} else {
				_, _ = c.stderr.Write([]byte(line + "\n"))
			}
		}
		close(c.lines)
	}()
	go func() {
		err := cmd.Wait()
		c.waitMu.Lock()
		c.waitErr = err
		c.waitMu.Unlock()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// await waits for the protocol line kind and decodes its JSON into v.
func (c *child) await(ctx context.Context, kind string, timeout time.Duration, v any) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.exited
				c.waitMu.Lock()
				err := c.waitErr
				c.waitMu.Unlock()
				return fmt.Errorf("consumer %s exited before %s (%v); its stderr:\n%s", c.name, kind, err, c.stderr.String())
			}
			k, body, _ := strings.Cut(line, " ")
			if k != kind {
				continue
			}
			if err := json.Unmarshal([]byte(body), v); err != nil {
				return fmt.Errorf("consumer %s: bad %s line: %w", c.name, kind, err)
			}
			return nil
		case <-t.C:
			return fmt.Errorf("consumer %s: no %s within %s", c.name, kind, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop closes the child's stdin (its signal to stop) and waits for it to exit, killing it
// after a grace period. It returns the child's stderr tail when it did not exit cleanly.
func (c *child) stop() error {
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("consumer %s did not exit within 20s of being told to stop; killed", c.name)
	}
	return nil
}

// tailBuffer keeps the last max bytes written and echoes each line to echo with a prefix.
type tailBuffer struct {
	mu     sync.Mutex
	buf    []byte
	max    int
	echo   io.Writer
	prefix string
	part   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	if t.echo != nil {
		t.part = append(t.part, p...)
		for {
			i := bytes.IndexByte(t.part, '\n')
			if i < 0 {
				break
			}
			fmt.Fprintf(t.echo, "%s%s\n", t.prefix, t.part[:i])
			t.part = t.part[i+1:]
		}
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
