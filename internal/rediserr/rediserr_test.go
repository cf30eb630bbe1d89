package rediserr_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// provoke returns the error one call to a real server answers.
type provoke func(ctx context.Context, t *testing.T) error

type classifyCase struct {
	name string
	call provoke
	want rediserr.Kind
}

// TestClassifyRealServer classifies the errors a private redis-server answers. The cases of
// one table run in order on one server: the later ones change its settings.
func TestClassifyRealServer(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	none := "missing-" + redistest.UniqueName(t)

	limited := func(user, pass string) *redis.Client {
		l := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: pass, MaxRetries: -1})
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	cases := []classifyCase{
		{"XREADGROUP on a missing stream", func(ctx context.Context, _ *testing.T) error {
			return c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{none, ">"}, Block: -1}).Err()
		}, rediserr.NoStream},
		{"XPENDING on a missing stream", func(ctx context.Context, _ *testing.T) error {
			return c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: none, Group: "g", Start: "-", End: "+", Count: 1}).Err()
		}, rediserr.NoStream},
		{"XINFO GROUPS on a missing stream (ERR no such key)", func(ctx context.Context, _ *testing.T) error {
			return c.XInfoGroups(ctx, none).Err()
		}, rediserr.NoStream},
		{"a script's XREADGROUP on a missing stream", func(ctx context.Context, _ *testing.T) error {
			return c.Eval(ctx, `return redis.call('XREADGROUP','GROUP','g','c','STREAMS',KEYS[1],'>')`, []string{none}).Err()
		}, rediserr.NoStream},
		{"XGROUP CREATE twice", func(ctx context.Context, t *testing.T) error {
			require.NoError(t, c.XGroupCreateMkStream(ctx, "s", "g", "0").Err())
			return c.XGroupCreateMkStream(ctx, "s", "g", "0").Err()
		}, rediserr.GroupExists},
		{"EVALSHA of an unknown script", func(ctx context.Context, _ *testing.T) error {
			return c.EvalSha(ctx, strings.Repeat("0", 40), nil).Err()
		}, rediserr.NoScript},
		{"an unknown command", func(ctx context.Context, _ *testing.T) error {
			return c.Do(ctx, "NOSUCHCOMMAND").Err()
		}, rediserr.UnknownCommand},
		{"XADD on a string", func(ctx context.Context, t *testing.T) error {
			require.NoError(t, c.Set(ctx, "str", "v", 0).Err())
			return c.XAdd(ctx, &redis.XAddArgs{Stream: "str", Values: []string{"f", "v"}}).Err()
		}, rediserr.WrongType},
		{"a script that raises an error", func(ctx context.Context, _ *testing.T) error {
			return c.Eval(ctx, `error('boom')`, nil).Err()
		}, rediserr.Other},
		{"a bad argument", func(ctx context.Context, _ *testing.T) error {
			return c.Do(ctx, "EXPIRE", "k", "soon").Err()
		}, rediserr.Other},
		{"a wrong password", func(ctx context.Context, t *testing.T) error {
			require.NoError(t, c.Do(ctx, "ACL", "SETUSER", "ro", "on", ">pw", "~allowed:*", "+get", "+ping").Err())
			return limited("ro", "not-pw").Ping(ctx).Err()
		}, rediserr.Auth},
		{"an ACL without the command", func(ctx context.Context, _ *testing.T) error {
			return limited("ro", "pw").Set(ctx, "allowed:x", "v", 0).Err()
		}, rediserr.NoPerm},
		{"an ACL without the key", func(ctx context.Context, _ *testing.T) error {
			return limited("ro", "pw").Get(ctx, "other").Err()
		}, rediserr.NoPerm},
		{"a script past its time limit", busy(c), rediserr.Busy},
		{"a write over maxmemory", func(ctx context.Context, t *testing.T) error {
			defer srv.RefuseWrites(t)()
			return c.Set(ctx, "k", "v", 0).Err()
		}, rediserr.OOM},
		{"a script's write over maxmemory", func(ctx context.Context, t *testing.T) error {
			defer srv.RefuseWrites(t)()
			return c.Eval(ctx, `return redis.call('SET', KEYS[1], 'v')`, []string{"k"}).Err()
		}, rediserr.OOM},
		{"a write to a replica", func(ctx context.Context, t *testing.T) error {
			require.NoError(t, c.Do(ctx, "REPLICAOF", "127.0.0.1", closedPort(t)).Err())
			return c.Set(ctx, "k", "v", 0).Err()
		}, rediserr.ReadOnly},
		{"a read from a replica without its master", func(ctx context.Context, t *testing.T) error {
			require.NoError(t, c.ConfigSet(ctx, "replica-serve-stale-data", "no").Err())
			return c.Get(ctx, "k").Err()
		}, rediserr.ReadOnly},
		{"no password to a server that wants one", func(ctx context.Context, t *testing.T) error {
			require.NoError(t, c.Do(ctx, "ACL", "SETUSER", "default", "resetpass", ">secret").Err())
			return limited("", "").Ping(ctx).Err()
		}, rediserr.Auth},
	}
	run(t, cases)
}

func run(t *testing.T, cases []classifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := tc.call(ctx, t)
			require.Error(t, err)
			require.Equal(t, tc.want, rediserr.Classify(err), "%v", err)
			require.Equal(t, tc.want, rediserr.Classify(fmt.Errorf("wrapped: %w", err)), "wrapped")
			require.Equal(t, tc.want, rediserr.Classify(rediserr.Wrap("op", err)), "Wrap")
		})
	}
}

// busy runs a script that loops until killed, and returns what another client is told
// meanwhile.
func busy(c *redis.Client) provoke {
	return func(ctx context.Context, t *testing.T) error {
		require.NoError(t, c.ConfigSet(ctx, "busy-reply-threshold", "10").Err())
		looper := redis.NewClient(&redis.Options{Addr: c.Options().Addr, MaxRetries: -1, ReadTimeout: -1})
		defer looper.Close()
		done := make(chan error, 1)
		go func() { done <- looper.Eval(ctx, `while true do end`, nil).Err() }()
		for {
			err := c.Ping(ctx).Err()
			if err == nil {
				continue // the script has not started yet
			}
			if ctx.Err() == nil {
				require.NoError(t, c.Do(ctx, "SCRIPT", "KILL").Err())
				require.Error(t, <-done, "the killed script")
			}
			return err
		}
	}
}

// closedPort returns a port nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, ln.Close())
	return port
}

// fake starts a server that answers every command it reads with the line reply ("-LOADING
// ..."), or, for an empty reply, closes the connection, or, for "wait", never answers.
func fake(t *testing.T, reply string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if r.Buffered() > 0 {
						continue // the rest of one command
					}
					switch reply {
					case "":
						return
					case "wait":
						continue
					}
					if _, err := io.WriteString(conn, reply+"\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// plain is a client that sends the command only: no HELLO, no CLIENT SETINFO, no retry.
func plain(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClassifyFakeReplies classifies the replies that a single private server does not give
// on demand (a server loading its data, a cluster), and failures of the connection.
func TestClassifyFakeReplies(t *testing.T) {
	ping := func(addr string) provoke {
		return func(ctx context.Context, t *testing.T) error { return plain(t, addr).Ping(ctx).Err() }
	}
	replies := []struct {
		reply string
		want  rediserr.Kind
	}{
		{"-LOADING Redis is loading the dataset in memory", rediserr.Loading},
		{"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.", rediserr.Busy},
		{"-MOVED 3999 127.0.0.1:6381", rediserr.Redirect},
		{"-ASK 3999 127.0.0.1:6381", rediserr.Redirect},
		{"-CLUSTERDOWN Hash slot not served", rediserr.ClusterDown},
		{"-TRYAGAIN Multiple keys request during rehashing of slot", rediserr.ClusterDown},
		{"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", rediserr.ReadOnly},
		{"-MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", rediserr.Other},
		{"-NOREPLICAS Not enough good replicas to write.", rediserr.Other},
		{"-BUSYKEY Target key name already exists.", rediserr.Other},
		{"-ERR max number of clients reached", rediserr.Other},
		// KVRocks puts ERR in front of every code.
		{"-ERR NOGROUP No such key 's' or consumer group 'g'", rediserr.NoStream},
		{"-ERR OOM command not allowed when used memory > 'maxmemory'.", rediserr.OOM},
		// Redis 6 wraps a script's error in its own.
		{"-ERR Error running script (call to f_0123): @user_script:1: NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option", rediserr.NoStream},
		{"-ERR unknown command `SPUBLISH`, with args beginning with: ", rediserr.UnknownCommand},
		// A blocked XREADGROUP whose stream was deleted (Redis 7), and CLIENT UNBLOCK's error.
		{"-UNBLOCKED the stream key no longer exists", rediserr.NoStream},
		{"-UNBLOCKED client unblocked via CLIENT UNBLOCK", rediserr.Other},
	}
	var cases []classifyCase
	for _, r := range replies {
		cases = append(cases, classifyCase{r.reply, ping(fake(t, r.reply)), r.want})
	}
	cases = append(cases,
		classifyCase{"connection refused", ping(net.JoinHostPort("127.0.0.1", closedPort(t))), rediserr.Unreachable},
		classifyCase{"connection closed by the server (EOF)", ping(fake(t, "")), rediserr.Unreachable},
		classifyCase{"no reply in the read timeout", ping(fake(t, "wait")), rediserr.Unreachable},
		classifyCase{"a closed client", func(ctx context.Context, t *testing.T) error {
			c := plain(t, fake(t, "+PONG"))
			require.NoError(t, c.Close())
			return c.Ping(ctx).Err()
		}, rediserr.Closed},
		classifyCase{"a canceled context", func(ctx context.Context, t *testing.T) error {
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			return plain(t, fake(t, "+PONG")).Ping(ctx).Err()
		}, rediserr.Canceled},
	)
	run(t, cases)
}

// reply is a server's error reply, as go-redis returns it.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

func TestClassifyValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want rediserr.Kind
	}{
		{"nil", nil, rediserr.Unknown},
		{"redis.Nil", redis.Nil, rediserr.Unknown},
		{"an error of our own", errors.New("pipeline: job not found"), rediserr.Unknown},
		{"a reply's text that is no reply", errors.New("NOGROUP No such key"), rediserr.Unknown},
		{"a deadline", context.DeadlineExceeded, rediserr.Canceled},
		{"a wrapped deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), rediserr.Canceled},
		{"a dial the context ended", &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}, rediserr.Unreachable},
		{"no such host", &net.DNSError{Err: "no such host", Name: "redis.invalid", IsNotFound: true}, rediserr.Unreachable},
		{"pool timeout", redis.ErrPoolTimeout, rediserr.Unreachable},
		{"an explicit kind wins", &rediserr.Error{Kind: rediserr.Busy, Err: reply("OOM no")}, rediserr.Busy},
		{"an Error without a kind looks inside", &rediserr.Error{Op: "x", Err: reply("OOM no")}, rediserr.OOM},
	} {
		require.Equal(t, tc.want, rediserr.Classify(tc.err), tc.name)
	}
}

func TestError(t *testing.T) {
	require.NoError(t, rediserr.Wrap("op", nil))
	err := rediserr.Wrap("stats", reply("NOGROUP No such key"))
	require.EqualError(t, err, "stats: NOGROUP No such key")
	require.ErrorIs(t, err, &rediserr.Error{Kind: rediserr.NoStream})
	require.ErrorIs(t, fmt.Errorf("x: %w", err), &rediserr.Error{Kind: rediserr.NoStream, Op: "stats"})
	require.NotErrorIs(t, err, &rediserr.Error{Kind: rediserr.NoStream, Op: "other"})
	require.NotErrorIs(t, err, &rediserr.Error{Kind: rediserr.OOM})
	var r redis.Error
	require.ErrorAs(t, err, &r, "the reply stays reachable")
	require.Equal(t, "op", (&rediserr.Error{Op: "op"}).Error())
	require.Equal(t, "no_stream", rediserr.NoStream.String())
	require.True(t, rediserr.OOM.Reply())
	require.False(t, rediserr.Unreachable.Reply())
}

// TestWrapDoesNotNest: a Wrap of an error that already names its operation keeps the inner
// op (the one nearest Redis) and the text says it once; context added with fmt.Errorf in
// between keeps the *Error reachable; an *Error without an Op is wrapped by one with it.
func TestWrapDoesNotNest(t *testing.T) {
	inner := rediserr.Wrap("get", reply("OOM command not allowed"))
	require.Same(t, inner, rediserr.Wrap("enqueue", inner))
	ctx := fmt.Errorf("get q/1: %w", inner)
	got := rediserr.Wrap("status", ctx)
	require.Same(t, ctx, got)
	require.EqualError(t, got, "get q/1: get: OOM command not allowed")
	require.Equal(t, "get", rediserr.OpOf(got))
	var e *rediserr.Error
	require.ErrorAs(t, got, &e)
	require.Equal(t, rediserr.OOM, e.Kind)

	bare := &rediserr.Error{Kind: rediserr.Busy, Err: reply("BUSY x")}
	w := rediserr.Wrap("promote", bare)
	require.Equal(t, "promote", rediserr.OpOf(w))
	require.Equal(t, rediserr.Busy, rediserr.Classify(w))
	require.EqualError(t, w, "promote: BUSY x")

	require.EqualError(t, rediserr.Wrap("stats", fmt.Errorf("stats q: %w", reply("OOM x"))), "stats q: OOM x",
		"the op is said once")
	require.EqualError(t, rediserr.Wrap("stats", reply("statsx")), "stats: statsx")
	require.Equal(t, redis.Nil, rediserr.Wrap("get", redis.Nil), "redis.Nil is no failure: returned as it is")
	require.Empty(t, rediserr.OpOf(errors.New("x")))
	require.Empty(t, rediserr.OpOf(nil))
}

func TestMessage(t *testing.T) {
	for in, want := range map[string]string{
		"pipeline: job not found":                                          "job not found",
		"pipeline: invalid argument: queue name is empty":                  "queue name is empty",
		"task 2: pipeline: invalid argument: type is empty":                "task 2: type is empty",
		"a\nstream: b\nkeys: invalid argument: c":                          "a\nb\nc",
		"NOPERM this user has no permissions to run the 'xadd' command":    "NOPERM this user has no permissions to run the 'xadd' command",
		"pipelines: not a package":                                         "pipelines: not a package",
		"recovery: lock lost: delayed: no queues":                          "lock lost: no queues",
		"pipeline: pipeline: twice":                                        "pipeline: twice", // as the regexes did
		"dial tcp: lookup redis: no such host; jobstate: invalid argument": "dial tcp: lookup redis: no such host; jobstate: invalid argument",
	} {
		require.Equal(t, want, rediserr.Message(errors.New(in)), in)
		require.Equal(t, oldStrip(in), rediserr.Message(errors.New(in)), "as the regexes did: %q", in)
	}
	require.Empty(t, rediserr.Message(nil))
}

// oldPrefix is the regex api/errors.go and the CLI used before Message: Message must strip
// what it stripped.
var oldPrefix = regexp.MustCompile(`(^|: |\n)(?:pipeline|stream|recovery|delayed|jobstate|keys)(?:: invalid argument)?: `)

func oldStrip(s string) string { return oldPrefix.ReplaceAllString(s, "$1") }

// FuzzClassify: Classify never panics, a reply's kind does not change when it is wrapped, text
// alone is never read as a reply, and Message strips what the old regexes stripped.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"NOGROUP No such key", "ERR no such key", "OOM command not allowed", "BUSY x",
		"BUSYGROUP Consumer Group name already exists", "ERR ", "ERR", "", "MOVED 1 a:1", "ERR unknown command 'x'",
		"pipeline: invalid argument: x", "a: stream: b\npipeline: c", "\n", ": "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := rediserr.Classify(reply(s))
		if !k.Reply() {
			t.Fatalf("reply %q: kind %v is no reply's", s, k)
		}
		for _, w := range []error{fmt.Errorf("x: %w", reply(s)), rediserr.Wrap(s, reply(s)),
			errors.Join(errors.New(s), reply(s)), rediserr.Wrap("a", rediserr.Wrap("b", reply(s)))} {
			if got := rediserr.Classify(w); got != k {
				t.Fatalf("%q: %v wrapped, %v bare", s, got, k)
			}
		}
		if got := rediserr.Classify(errors.New(s)); got != rediserr.Unknown {
			t.Fatalf("text %q alone read as %v", s, got)
		}
		if got, want := rediserr.Message(errors.New(s)), oldStrip(s); got != want {
			t.Fatalf("Message(%q) = %q, the regexes gave %q", s, got, want)
		}
	})
}
