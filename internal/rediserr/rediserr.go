// Package rediserr is Conveyor's one reading of the errors a Redis call returns. It says what
// kind of failure it is. Say the stream is not there, or the network failed. Or the server is
// loading, out of memory or refusing the credentials. So each caller decides what to do from a
// Kind, and no other package looks at the text of a Redis reply.
//
// Classify reads an error as it comes from go-redis, however wrapped. Wrap adds the operation
// that failed. Its Error follows asynq's internal/errors Error{Code, Op, Err}. Message gives an
// error's text for a person: what the API and the CLI show.
//
// A reply's kind comes from its first word, the error code Redis puts in front of the message
// ("NOGROUP", "OOM", "WRONGPASS"). Some servers (KVRocks) put "ERR " before every code. That is
// skipped, as go-redis's own HasErrorPrefix does.
package rediserr

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Kind is what kind of failure an error is.
type Kind uint8

// The kinds. The reply kinds name a Redis error code; a reply whose code none of them names is
// Other. The order of the checks (see Classify) is: an *Error's own Kind, a reply of the
// server, a closed client, a network failure, a context's end.
const (
	// Unknown: nil, redis.Nil (no value, not a failure), or an error that is none of Redis's
	// and no network failure (a decoding error, an error of Conveyor's own).
	Unknown Kind = iota
	// Canceled: the caller's context was canceled or its deadline passed before Redis answered.
	// That is not Redis's fault, so it is not Unreachable. But when the error also carries a
	// network failure, it is Unreachable, since that is what the connection saw. Such a failure
	// is a dial or a read cut short by the context.
	Canceled
	// Closed: the go-redis client (or its pool) was closed by its owner: no later call on it
	// can succeed, whatever Redis does.
	Closed
	// Unreachable: no answer from Redis. Causes are a dial that failed (refused, no such host,
	// timed out), and a connection reset, cut (EOF) or timed out while waiting for a reply. So
	// is a pool with no free connection in time.
	Unreachable
	// NoStream: NOGROUP or "no such key": the stream or its consumer group does not exist
	// (no worker made them yet, or they were deleted). Also found inside a longer message, as
	// servers before Redis 7 and miniredis wrap an error raised by a script.
	NoStream
	// GroupExists: BUSYGROUP, the consumer group to create exists already.
	GroupExists
	// NoScript: NOSCRIPT, the server does not have the script (its cache was flushed or the
	// server restarted): load it and call again.
	NoScript
	// UnknownCommand: the server does not know the command (an older Redis, a proxy).
	UnknownCommand
	// Loading: LOADING, the server is loading its data set after a start.
	Loading
	// Busy: BUSY, the server is running a script or function past its time limit.
	Busy
	// OOM: the server's used memory is over its maxmemory and it refuses writes.
	OOM
	// ReadOnly: the server is a replica: READONLY for a write, MASTERDOWN while it has lost
	// its master (replica-serve-stale-data no). It passes with a failover.
	ReadOnly
	// Redirect: MOVED or ASK, a cluster node sends the command to another node.
	Redirect
	// ClusterDown: CLUSTERDOWN or TRYAGAIN, the cluster cannot serve the slot now.
	ClusterDown
	// Auth: NOAUTH or WRONGPASS, the server wants credentials or refuses the ones given.
	Auth
	// NoPerm: NOPERM, an ACL refuses the user a command, key or channel.
	NoPerm
	// WrongType: WRONGTYPE, a command on a key that holds another type.
	WrongType
	// Other: any other reply of the server (ERR and the codes not listed above: MISCONF,
	// NOREPLICAS, EXECABORT, a script's error). Whether it is worth another try is the
	// caller's decision.
	Other
)

var kindNames = [...]string{
	Unknown:        "unknown",
	Canceled:       "canceled",
	Closed:         "closed",
	Unreachable:    "unreachable",
	NoStream:       "no_stream",
	GroupExists:    "group_exists",
	NoScript:       "no_script",
	UnknownCommand: "unknown_command",
	Loading:        "loading",
	Busy:           "busy",
	OOM:            "oom",
	ReadOnly:       "read_only",
	Redirect:       "redirect",
	ClusterDown:    "cluster_down",
	Auth:           "auth",
	NoPerm:         "no_perm",
	WrongType:      "wrong_type",
	Other:          "other",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Reply reports whether the kind is a reply of the server (it answered, with an error).
func (k Kind) Reply() bool { return k >= NoStream }

// codes maps a reply's error code to its kind.
var codes = map[string]Kind{
	"NOGROUP":     NoStream,
	"BUSYGROUP":   GroupExists,
	"NOSCRIPT":    NoScript,
	"LOADING":     Loading,
	"BUSY":        Busy,
	"OOM":         OOM,
	"READONLY":    ReadOnly,
	"MASTERDOWN":  ReadOnly,
	"MOVED":       Redirect,
	"ASK":         Redirect,
	"CLUSTERDOWN": ClusterDown,
	"TRYAGAIN":    ClusterDown,
	"NOAUTH":      Auth,
	"WRONGPASS":   Auth,
	"NOPERM":      NoPerm,
	"WRONGTYPE":   WrongType,
}

// Classify returns the kind of err. An *Error in err's chain gives its Kind. Otherwise a
// server's reply in the chain gives the kind of its code. Then a closed client, a network
// failure and a context's end are looked for, in that order (see the kinds).
func Classify(err error) Kind {
	if err == nil {
		return Unknown
	}
	for e := err; ; {
		var ce *Error
		if !errors.As(e, &ce) {
			break
		}
		if ce.Kind != Unknown {
			return ce.Kind
		}
		e = ce.Err
	}
	if errors.Is(err, redis.Nil) {
		return Unknown
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return replyKind(reply.Error())
	}
	switch {
	case errors.Is(err, redis.ErrClosed):
		return Closed
	case unreachable(err):
		return Unreachable
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return Canceled
	}
	return Unknown
}

// replyKind is the kind of a server's error reply.
func replyKind(msg string) Kind {
	msg = strings.TrimPrefix(msg, "ERR ")
	code, _, _ := strings.Cut(msg, " ")
	if k, ok := codes[code]; ok {
		return k
	}
	switch {
	case strings.Contains(msg, "NOGROUP") || strings.Contains(strings.ToLower(msg), "no such key"):
		return NoStream
	case code == "UNBLOCKED" && strings.Contains(msg, "no longer exists"):
		// A blocked XREADGROUP whose stream was deleted (Redis 7: "UNBLOCKED the stream key
		// no longer exists"): Redis is fine, the stream is gone.
		return NoStream
	case strings.Contains(msg, "unknown command"):
		return UnknownCommand
	}
	return Other
}

// unreachable reports a failure of the connection itself. context.DeadlineExceeded is a
// net.Error too (it has Timeout): alone, it is the caller's deadline, not the network's.
func unreachable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne != context.DeadlineExceeded {
		return true
	}
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// IsNoStream reports whether err says the stream or its consumer group does not exist.
func IsNoStream(err error) bool { return Classify(err) == NoStream }

// IsGroupExists reports whether err says the consumer group exists already (BUSYGROUP): for a
// create that may run twice, a success.
func IsGroupExists(err error) bool { return Classify(err) == GroupExists }

// IsNoScript reports whether err says the server does not have the script.
func IsNoScript(err error) bool { return Classify(err) == NoScript }

// IsUnknownCommand reports whether err says the server does not know the command.
func IsUnknownCommand(err error) bool { return Classify(err) == UnknownCommand }

// IsOOM reports whether err is the server refusing a write for want of memory.
func IsOOM(err error) bool { return Classify(err) == OOM }

// IsAuth reports whether err is the server asking for credentials or refusing them.
func IsAuth(err error) bool { return Classify(err) == Auth }

// IsNoPerm reports whether err is an ACL refusing a command, key or channel.
func IsNoPerm(err error) bool { return Classify(err) == NoPerm }

// IsRedirect reports whether err is a cluster node's MOVED or ASK.
func IsRedirect(err error) bool { return Classify(err) == Redirect }

// IsUnreachable reports whether err is a failure to reach Redis (see Unreachable).
func IsUnreachable(err error) bool { return Classify(err) == Unreachable }

// Error is an error with its kind and the operation that failed. Conveyor's calls to Redis
// return their Redis failures as an *Error. Those are the storage layer internal/jobstate, the
// pipeline's own reads, the scheduler, the recoverers and the event watcher. So the HTTP API and
// the CLI render a failure from its Kind and Op (Classify and OpOf, or errors.As), never from
// its text.
type Error struct {
	Kind Kind
	// Op names the operation, a short stable word the caller would put in front of the error:
	// "enqueue", "finish", "get", "stats", "list", "replay", "purge", "promote", "recover". It
	// is part of Error's text, and the API's error body carries it as "op".
	Op  string
	Err error
}

// Wrap returns err with its kind (Classify) and the operation op. It returns nil for a nil err.
// It returns redis.Nil as it is: no value, not a failure, and callers compare it.
//
// Wrapping does not nest. An err that already carries an *Error with an Op is returned
// unchanged, anywhere in its chain that errors.As finds it. So the innermost operation, the one
// nearest Redis, names the failure. The text says it once ("get: OOM ..."), never "get: get: OOM
// ...". A caller that wants more context adds it with fmt.Errorf, which keeps the *Error
// reachable. An *Error without an Op in err gets wrapped by one that has it.
func Wrap(op string, err error) error {
	if err == nil || err == redis.Nil {
		return err
	}
	if OpOf(err) != "" {
		return err
	}
	return &Error{Kind: Classify(err), Op: op, Err: err}
}

// OpOf returns the Op of the first *Error with an Op in err's chain. It returns "" when there is
// none: the error did not come from a call to Redis, or its caller named no operation.
func OpOf(err error) string {
	for e := err; e != nil; {
		var ce *Error
		if !errors.As(e, &ce) {
			return ""
		}
		if ce.Op != "" {
			return ce.Op
		}
		e = ce.Err
	}
	return ""
}

// Error is "op: err", or err's text without an Op. The kind is left out, so wrapping keeps the
// text a caller would have written with fmt.Errorf("op: %w", err). The op is said once: a text
// that begins with it already ("stats orders: ...") is left as it is.
func (e *Error) Error() string {
	var s string
	if e.Err != nil {
		s = e.Err.Error()
	}
	switch {
	case e.Op == "":
		return s
	case s == "":
		return e.Op
	case strings.HasPrefix(s, e.Op) && (strings.HasPrefix(s[len(e.Op):], ":") || strings.HasPrefix(s[len(e.Op):], " ")):
		return s
	}
	return e.Op + ": " + s
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches a target *Error of the same Kind whose Op, if it has one, is e's:
// errors.Is(err, &rediserr.Error{Kind: rediserr.OOM}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Op == "" || t.Op == e.Op)
}

// packages are the packages of this module whose errors begin with their name ("pipeline: job
// not found"). In front of a message a user reads, the name says where in our code the error was
// made. That means nothing to the user.
var packages = []string{"pipeline", "stream", "recovery", "delayed", "jobstate", "keys"}

// invalidArg follows a package's name in its input errors ("pipeline: invalid argument: ").
const invalidArg = ": invalid argument: "

// Message is err's text for a person: without the package prefixes of this module's errors
// ("pipeline: ", "pipeline: invalid argument: "), at the start of the text and after each ": "
// or newline where a wrapped or joined error begins. A Redis reply keeps its code (NOPERM,
// WRONGPASS): it is what the server's documentation and logs call the error.
func Message(err error) string {
	if err == nil {
		return ""
	}
	return stripPrefixes(err.Error())
}

func stripPrefixes(s string) string {
	var b strings.Builder
	done := 0 // s[:done] is written or dropped
	for at := 0; at < len(s); {
		n := prefixAt(s, at)
		if n == 0 {
			at++
			continue
		}
		sep := separatorAt(s, at)
		b.WriteString(s[done : at+sep])
		done = at + n
		at = done
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// prefixAt returns the length of a package prefix, with the separator in front of it, that
// begins at s[at:] (at the start of s, or at a ": " or newline), or 0.
func prefixAt(s string, at int) int {
	if at == 0 {
		if n := packagePrefix(s); n > 0 {
			return n
		}
	}
	sep := separatorAt(s, at)
	if sep == 0 {
		return 0
	}
	if n := packagePrefix(s[at+sep:]); n > 0 {
		return sep + n
	}
	return 0
}

// separatorAt returns the length of the ": " or newline at s[at:], or 0.
func separatorAt(s string, at int) int {
	switch {
	case strings.HasPrefix(s[at:], ": "):
		return 2
	case s[at] == '\n':
		return 1
	}
	return 0
}

// packagePrefix returns the length of the package prefix s begins with, or 0.
func packagePrefix(s string) int {
	for _, p := range packages {
		rest, ok := strings.CutPrefix(s, p)
		if !ok {
			continue
		}
		if strings.HasPrefix(rest, invalidArg) {
			return len(p) + len(invalidArg)
		}
		if strings.HasPrefix(rest, ": ") {
			return len(p) + 2
		}
	}
	return 0
}
