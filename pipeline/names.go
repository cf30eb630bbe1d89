package pipeline

import (
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Errors as a tool outside the library sees them. The conveyor command words its failures with
// these. It lives in a module of its own and uses the public API alone; the names it checks
// before it connects are package keyspace's.

// DefaultPrefix is the key prefix of a Client, Worker or Inspector configured without one.
const DefaultPrefix = keys.DefaultPrefix

// ErrorOp names the operation whose Redis call failed in err, or "" when err carries none. It
// is the word the library's error text begins with: "enqueue", "stats", "list" and the like.
func ErrorOp(err error) string { return rediserr.OpOf(err) }

// ErrorKind names the kind of Redis failure err is, so that a caller branches on it and not on
// its text. The kinds: "unreachable", "auth" (NOAUTH, WRONGPASS), "no_perm" (an ACL),
// "redirect" (MOVED or ASK), "oom", "read_only", "cluster_down", "loading", "busy", "canceled"
// and "closed". Any other reply of Redis is "other"; nil or an error not Redis's is "unknown".
func ErrorKind(err error) string { return rediserr.Classify(err).String() }

// ErrorMessage is err's text without the library's package prefixes ("pipeline: ",
// "pipeline: invalid argument: "), which mean nothing to the user of a command or a page.
func ErrorMessage(err error) string { return rediserr.Message(err) }
