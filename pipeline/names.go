package pipeline

import (
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Names and errors as a tool outside the library sees them. The conveyor command checks its
// arguments with these before it connects, and words its failures with them. It lives in a
// module of its own and uses the public API alone.

// DefaultPrefix is the key prefix of a Client, Worker or Inspector configured without one.
const DefaultPrefix = keys.DefaultPrefix

// MaxScheduleLen bounds a schedule's name in bytes.
const MaxScheduleLen = keys.MaxScheduleLen

// ValidateQueue reports whether name can be a queue's name: 1 to 128 characters of
// [A-Za-z0-9._-]. Every call taking a queue checks this and wraps its error in ErrInvalid.
func ValidateQueue(name string) error { return keys.ValidateQueue(name) }

// ValidateID reports whether id can be a job's or workflow's id: 1 to 128 characters of
// [A-Za-z0-9._:-].
func ValidateID(id string) error { return keys.ValidateID(id) }

// ValidateSchedule reports whether name can be a schedule's name (at most MaxScheduleLen
// bytes, the characters of a job id).
func ValidateSchedule(name string) error { return keys.ValidateSchedule(name) }

// QueueKeys names the Redis keys of one partition of a queue, for operators' tools. Such a
// tool asks which cluster node holds a queue, or a chaos test deletes keys underneath the
// library. Every key of a partition shares one cluster hash slot. The layout is not a stable
// API; a tool reading these keys must run against the same library version.
type QueueKeys struct {
	// Stream is the stream that carries the partition's queued jobs.
	Stream string
	// Group is the workers' consumer group on Stream.
	Group string
	// Scheduled is the sorted set of the partition's delayed and retrying jobs, scored by due time.
	Scheduled string
	// JobPrefix prefixes a job's hash: JobPrefix + id.
	JobPrefix string
	// UniquePrefix prefixes the key a unique job holds (WithUnique): UniquePrefix + key.
	UniquePrefix string
}

// KeysOf returns the keys of each partition of queue, in order, under prefix (DefaultPrefix
// when empty). A queue of 1 partition or less has one entry.
func KeysOf(prefix, queue string, partitions int) []QueueKeys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	p := max(partitions, 1)
	out := make([]QueueKeys, p)
	for i := range out {
		q := keys.New(prefix, keys.PartitionName(queue, i, p))
		out[i] = QueueKeys{Stream: q.Stream(), Group: keys.Group, Scheduled: q.Scheduled(), JobPrefix: q.JobPrefix(),
			UniquePrefix: q.UniquePrefix()}
	}
	return out
}

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
