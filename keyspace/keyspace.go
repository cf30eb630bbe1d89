// Package keyspace is Conveyor's names as a tool outside the library sees them: the rules a
// queue name, a job id and a schedule name follow, and the Redis keys of a queue. A command
// checks its arguments with it before it connects; an operator's tool finds a queue's keys
// (which cluster node holds it) or a chaos test deletes them. A publish, a worker or an
// Inspector needs none of it: every call of package pipeline checks its own arguments and
// wraps the error in pipeline.ErrInvalid.
package keyspace

import "github.com/conveyorq/conveyor/internal/keys"

// MaxScheduleLen bounds a schedule's name in bytes.
const MaxScheduleLen = keys.MaxScheduleLen

// ValidateQueue reports whether name can be a queue's name: 1 to 128 characters of
// [A-Za-z0-9._-].
func ValidateQueue(name string) error { return keys.ValidateQueue(name) }

// ValidateID reports whether id can be a job's or workflow's id: 1 to 128 characters of
// [A-Za-z0-9._:-].
func ValidateID(id string) error { return keys.ValidateID(id) }

// ValidateSchedule reports whether name can be a schedule's name (at most MaxScheduleLen
// bytes, the characters of a job id).
func ValidateSchedule(name string) error { return keys.ValidateSchedule(name) }

// QueueKeys names the Redis keys of one partition of a queue. Every key of a partition shares
// one cluster hash slot. The layout is not a stable API; a tool reading these keys must run
// against the same library version.
type QueueKeys struct {
	// Stream is the stream that carries the partition's queued jobs.
	Stream string
	// Group is the workers' consumer group on Stream.
	Group string
	// Scheduled is the sorted set of the partition's delayed and retrying jobs, scored by due time.
	Scheduled string
	// JobPrefix prefixes a job's hash: JobPrefix + id.
	JobPrefix string
	// UniquePrefix prefixes the key a unique job holds (pipeline.WithUnique): UniquePrefix + key.
	UniquePrefix string
	// LimitPrefix prefixes the keys of the queue's limits' state: a rate's log, the slots'
	// holders, the jobs waiting for a slot.
	LimitPrefix string
	// WorkflowWaiting is the sorted set of the partition's workflow tasks waiting for their
	// dependencies, scored by publish time.
	WorkflowWaiting string
}

// KeysOf returns the keys of each partition of queue, in order, under prefix
// (pipeline.DefaultPrefix when empty). A queue of 1 partition or less has one entry.
func KeysOf(prefix, queue string, partitions int) []QueueKeys {
	if prefix == "" {
		prefix = keys.DefaultPrefix
	}
	p := max(partitions, 1)
	out := make([]QueueKeys, p)
	for i := range out {
		q := keys.New(prefix, keys.PartitionName(queue, i, p))
		out[i] = QueueKeys{Stream: q.Stream(), Group: keys.Group, Scheduled: q.Scheduled(), JobPrefix: q.JobPrefix(),
			UniquePrefix: q.UniquePrefix(), LimitPrefix: q.LimitPrefix(), WorkflowWaiting: q.WorkflowWaiting()}
	}
	return out
}
