// Package keys names the Redis keys, job-hash fields and stream-entry fields Conveyor uses.
//
// # Hash tags
//
// Every per-queue key carries the queue name as a Redis Cluster hash tag, `{q}`. So all of a
// queue's keys live in one slot, and a Lua script can touch any of them atomically. Different
// queues spread over the cluster's shards. Two keys are global: the set of known queue names and
// the hash of partition counts. No script touches them.
//
// # Partitions
//
// A queue of P > 1 partitions is P key spaces. Partition i has the hash tag {q#i.s}; the suffix s
// puts the tag in the middle slot of the i-th of P equal shares of the slots (PartitionName). So
// the partitions spread over a cluster's masters. Each partition has its own stream, scheduled and
// dead sets, job records, counters, unique keys, lock and wake channel. A queue of one partition
// keeps the plain {q} keys. The counts live in the global hash Partitions.
//
// # Priority levels
//
// Each priority level p has its own stream. Queue.LevelStream(p) is "prefix:{q}:stream:p<p>",
// beside the level-1 stream "prefix:{q}:stream", in the same hash tag. Each has its own consumer
// group Group. The set Queue.Levels names the levels above 1 that the queue's jobs were published
// with. Workers read a level's stream, and the recoverer scans it, only once it is in that set. So
// a queue that never used a level has its one stream. A worker reads each level stream under the
// view Queue.AtLevel(p).
//
// # Memory
//
// Job hashes stay small on purpose. A queued job's hash holds only short fields, so Redis keeps it
// in the compact listpack encoding (every value at most hash-max-listpack-value, 64 bytes). The
// payload and metadata live in one place: the stream entry while the job is in the stream, the
// hash otherwise (scheduled, finished, dead). The job id and queue are not fields because the key
// already names them.
package keys

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "conveyor"

// Group is the consumer group every worker reads a queue's stream in.
const Group = "conveyor"

// MaxNameLen bounds queue names, job ids and unique keys, so keys stay short and printable.
const MaxNameLen = 128

// Job-hash field names.
const (
	FieldType        = "type"
	FieldStatus      = "status"
	FieldAttempt     = "attempt"     // executions started so far; absent means 0
	FieldMaxRetries  = "max_retries" // retries after the first attempt
	FieldTimeout     = "timeout_ms"  // per-attempt timeout; absent means none
	FieldCreatedAt   = "created_at"  // unix ms
	FieldRunAt       = "run_at"      // unix ms the job is (or was) due; absent means created_at
	FieldEnqueuedAt  = "enqueued_at" // unix ms it last entered the stream; absent: created_at
	FieldStartedAt   = "started_at"  // unix ms its last attempt started
	FieldCompletedAt = "completed_at"
	FieldWorker      = "worker" // consumer name of the worker that ran it last
	FieldEntry       = "entry"  // id of the stream entry that carries it now: the fencing token
	FieldLastError   = "last_error"
	FieldResult      = "result"
	FieldVersion     = "version" // bumped on every transition
	FieldPayload     = "payload" // only while the job is outside the stream
	FieldMetadata    = "metadata"
	FieldUnique      = "unique"        // the unique key's full name, when the job has one
	FieldUniqueTTL   = "unique_ttl_ms" // how long the unique key is held, for a replay
	FieldRetention   = "retention_ms"  // per-job retention; absent means the queue's default
	// FieldWatched marks a job someone waits on (pipeline.Waiter). finish.lua announces the
	// outcome of marked jobs only, sparing every other job its share of an SPUBLISH.
	FieldWatched = "watched"
	// The debounce window of a job published with a debounce key (pipeline.WithDebounce).
	// FieldDebounce is the debounce key's full name (Queue.Debounce). FieldDebounceFirst is the
	// window's first publish. FieldDebounceUntil is the latest time the job may be due (first +
	// max wait). Both times are unix ms by Redis's clock. FieldDebouncePubs counts the window's
	// publishes, the first included.
	FieldDebounce      = "debounce"
	FieldDebounceFirst = "debounce_first"
	FieldDebounceUntil = "debounce_until"
	FieldDebouncePubs  = "debounce_pubs"
	// FieldLimitKey is the key a job's per-key limits count it under (pipeline.WithLimitKey).
	FieldLimitKey = "limit_key"
	// FieldKeyCounted marks a job counted in its queue's (partition's) count of unfinished jobs
	// per limit key (Queue.KeyWaiting; max_waiting_per_key, docs/OPERATIONS.md, "Bounded
	// queues"): "1", set by the publish that counted it, deleted by the transition that ends it
	// (lua/keywait.lua), so that no job is taken off its key's count twice.
	FieldKeyCounted = "kc"
	// FieldLimitSlots names the concurrency slots a running job holds, in jobs admitted before
	// leases: the queue's limit prefix, then each scope instance, newline-joined. Cancel, release
	// and recovery still give them back (jobstate/lua/limits.lua: cv_release_slots), so the jobs of an older
	// worker leave no slot taken. Admission no longer writes it: a job's slots are its worker's
	// lease's (internal/engine's admit.go).
	FieldLimitSlots = "limit_slots"
	// FieldLimitWait is the scope instance whose concurrency slot a deferred job waits for. The
	// job is then scheduled in that instance's wait list, not the scheduled set.
	FieldLimitWait = "limit_wait"
	// FieldRateWait marks a job a rate limit deferred: "<due unix ms> <scope instance>", written
	// by admit.lua in the HSET that schedules it. It is never cleared: a reader takes it as the
	// job's reason only while the job is scheduled for that very due time (run_at), so a
	// promote, a run, a retry or a cancel outdates it without a write on the job's path.
	FieldRateWait = "rate_wait"
	// FieldSnoozes counts the times a job's handler snoozed it (pipeline.Snooze). It is bounded,
	// so a job snoozing forever ends failed.
	FieldSnoozes = "snoozes"
	// FieldScheduledFor says why a scheduled job waits, when it is not a delay it was published
	// with: "retry" (a failed attempt's backoff) or "snooze" (its handler asked to run later).
	FieldScheduledFor = "scheduled_for"
	// FieldPriority is a job's priority level within its queue (pipeline.WithPriority), 2 to
	// MaxPriority. Absent means 1, the first served and the default. The level picks the stream
	// that carries the job (Queue.LevelStream).
	FieldPriority = "priority"
	// FieldGroup is a job's fair group within its queue (pipeline.WithGroup); absent means none.
	FieldGroup = "group"
	// FieldProgress is the last progress a job's handler reported (pipeline.Job.Progress,
	// progress.lua): "<attempt> <entry> <at unix ms> <percent> <message>". It is one field, so a
	// report is written and read whole. It stays when the attempt ends; readers show it only for
	// the attempt the job's attempt field counts (jobstate.ParseProgress).
	FieldProgress = "progress"
	// FieldAttempts is a job's attempt history, oldest first, the last MaxAttemptHistory. It lists
	// the attempts that ended without ending the job: a retry, a snooze, a lost worker. It also
	// lists the one that sent the job to the dead set. The scripts finish.lua and recover.lua
	// write it (record.lua's cv_attempt).
	//
	// Each line is "<attempt>\t<worker>\t<started ms>\t<ended ms>\t<outcome>\t<error>". Tabs and
	// newlines in the worker and error become spaces; the error is cut to MaxAttemptError bytes. A
	// completed job's last attempt is not written: the hash's worker, started_at and completed_at
	// tell it, so the happy path writes nothing more.
	FieldAttempts = "attempts"
	// The fields of a workflow's task (pipeline.Client.Workflow, pipeline.Client.Batch; workflows.lua's
	// cv_wf_* functions). FieldWorkflow is the full name of the workflow's hash (Queue.Workflow,
	// in the queue's hash tag). FieldWfTask is the task's name in it. FieldWfDeps and FieldWfNext
	// are the ids of the tasks it waits for and of those that wait for it (space-separated).
	//
	// FieldWfLeft counts its dependencies that have not completed (for a Finally task: are not
	// final). FieldWfMode is '1' for a Finally task. FieldWfTopo is its place in a topological
	// order of the workflow; a replay restores canceled tasks in that order. FieldWfDone,
	// FieldWfFailed and FieldWfCanceled are the outcomes a Finally task's dependencies had.
	//
	// FieldCanceledBy is the id of the task whose failure canceled it. It is absent when a caller
	// canceled it, because a replay undoes only the workflow's own cancels.
	FieldWorkflow   = "wf"
	FieldWfTask     = "wf_task"
	FieldWfDeps     = "wf_deps"
	FieldWfNext     = "wf_next"
	FieldWfLeft     = "wf_left"
	FieldWfMode     = "wf_mode"
	FieldWfTopo     = "wf_topo"
	FieldWfDone     = "wf_done"
	FieldWfFailed   = "wf_failed"
	FieldWfCanceled = "wf_canceled"
	FieldCanceledBy = "canceled_by"
)

// The fields of a workflow's hash (Queue.Workflow): its name and kind (WorkflowKindWorkflow or
// WorkflowKindBatch), and the JSON of its tasks and dependencies as published, for readers. Then
// when it was created and finished (unix ms), and the retention its hash takes once it finished
// without a dead task. Then a digest of what was published, and the counts of its tasks: in all,
// completed, dead (failed), canceled and purged (a dead task purged).
//
// Besides these, each finished task has a field WorkflowTaskStatus + name: 'C' completed, 'F'
// dead, 'X' canceled or 'P' purged. Each completed task that others wait for has a field
// WorkflowTaskResult + name, its result, for Job.Dependencies.
const (
	FieldWorkflowName = "name"
	FieldWorkflowKind = "kind"
	FieldWorkflowDoc  = "doc"
	// FieldWorkflowDigest identifies what was published: a hash of the tasks' names, types,
	// dependencies and payloads (jobstate.NewWorkflow.Digest). A publish of the same id must match
	// it to be the same workflow, as a job's id must come with the same type and payload.
	FieldWorkflowDigest    = "digest"
	FieldWorkflowCreated   = "created_at"
	FieldWorkflowFinished  = "finished_at"
	FieldWorkflowRetention = "retention_ms"
	FieldWorkflowTasks     = "tasks"
	FieldWorkflowCompleted = "completed"
	FieldWorkflowFailed    = "failed"
	FieldWorkflowCanceled  = "canceled"
	FieldWorkflowPurged    = "purged"
	WorkflowTaskStatus     = "s:"
	WorkflowTaskResult     = "r:"
	WorkflowKindWorkflow   = "workflow"
	WorkflowKindBatch      = "batch"
)

// The outcomes of an attempt in a job's attempt history (FieldAttempts): retried after a failure,
// snoozed by its handler, lost with its worker (recovery), or failed for good. A replay
// (replay.lua) writes a line of its own at the replay's time: attempt 0, outcome AttemptReplay.
// The attempts after it count from 1 again.
const (
	AttemptRetry  = "retry"
	AttemptSnooze = "snooze"
	AttemptLost   = "lost"
	AttemptFailed = "failed"
	AttemptReplay = "replayed"
)

// AttemptRunning is the outcome of a running attempt's item in a job's logs key (Queue.Logs):
// its lines so far, written with a progress report and replaced by its outcome's. An item
// left so by an attempt that moved on is a lost attempt's.
const AttemptRunning = "running"

// Bounds of a job's attempt history (FieldAttempts): the attempts kept, and the bytes of each
// one's error. The last error is whole in FieldLastError. The function cv_attempt in record.lua holds
// the same numbers. 20 attempts of at most 512 bytes bound the field near 11 KB. That is more
// retries than most jobs are given.
const (
	MaxAttemptHistory = 20
	MaxAttemptError   = 512
)

// FinishedIndexCap bounds each of a queue's (or partition's) indexes of finished jobs, in ids.
// Those are Queue.Completed and Queue.Canceled. The function cv_index in record.lua trims the oldest
// chunks beyond the cap, but keeps the chunk a call just added. So an index holds at most the cap
// plus one call's.
//
// The indexes let an operator page through recent jobs. 10,000 a partition is more pages than
// anyone reads. It bounds an index near 1 MB whatever the throughput and retention. Unbounded, a
// queue completing 1,000 jobs a second would index 86 million jobs a day of retention. The records
// themselves stay for their retention, found by id.
const FinishedIndexCap = 10000

// PieceSep: a completed job's payload, metadata and result longer than RecordPiece bytes are
// kept in pieces: the field's own name, then name+"+1", name+"+2"... up to RecordMaxPieces
// (past that, whole). A hash whose values are all that short stays one listpack in Redis
// (record.lua: cv_put_long).
const PieceSep = "+"

// RecordPiece and RecordMaxPieces: see PieceSep. 64 is Redis's default
// hash-max-listpack-value.
const (
	RecordPiece     = 64
	RecordMaxPieces = 96
)

// Priority levels within a queue (pipeline.WithPriority): 1 is served first and is the
// default; River's levels.
const (
	MinPriority = 1
	MaxPriority = 4
)

// Bounds of a job's options, which pipeline's options and the control keys of a Watermill
// message (internal/control) both check.
const (
	// MaxRetries bounds pipeline.WithMaxRetries.
	MaxRetries = 1000
	// MaxDebounceWait bounds WithDebounce's quiet and max wait.
	MaxDebounceWait = 365 * 24 * time.Hour
)

// MaxRunAt is the latest due time a job may have (pipeline.WithRunAt).
var MaxRunAt = time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)

// Stream-entry field names. The first three are watermill-redisstream's layout, so the stock
// Watermill subscriber can read a Conveyor stream. Conveyor's own field is beside them. Every
// entry carries the same fields in the same order, so Redis stores the field names once per
// listpack node, not once per entry.
const (
	EntryUUID     = "_watermill_message_uuid" // the job id
	EntryPayload  = "payload"
	EntryMetadata = "metadata" // msgpack map of strings, or empty
	// EntryTraceparent is not a field but a key inside EntryMetadata: a job's W3C trace context,
	// its publish span's. The script recover.lua reads it, to report the jobs it put back to the
	// recoverer's tracing. The name is the header's, as Trace Context spells it.
	EntryTraceparent = "traceparent"
	// EntryTracelinks is another key inside EntryMetadata: the W3C trace contexts of the process
	// spans of the workflow tasks a task waited for (space-separated, at most 32). The script that
	// releases the task writes it; the task's process span links to them.
	EntryTracelinks = "tracelinks"
	// EntryJob packs the rest, see FormatEntryJob. One field instead of four: each field is two
	// more strings for every reader of every entry to parse. It is also more work for XADD and
	// XREADGROUP in Redis (docs/BENCHMARKS.md, "What each change bought").
	EntryJob = "conveyor"
	// EntryLimitKey is the job's limit key (pipeline.WithLimitKey). It comes after the other
	// fields, only in the entries of jobs that have one. A worker holds the job to its per-key
	// limits from the entry alone, without reading the job's hash.
	EntryLimitKey = "limit_key"
)

// FormatEntryJob is the value of a stream entry's EntryJob field: "<attempt> <max_retries>
// <timeout_ms> <type>". The attempt is the 1-based number of the attempt the entry starts. The
// type is last because it is the only part that is not a number; it holds no spaces.
// internal/jobstate/lua/entry.lua (cv_xadd, cv_job) writes and reads the same format.
func FormatEntryJob(attempt, maxRetries int, timeoutMS int64, typ string) string {
	return strconv.Itoa(attempt) + " " + strconv.Itoa(maxRetries) + " " +
		strconv.FormatInt(timeoutMS, 10) + " " + typ
}

// ParseEntryJob reads an EntryJob value; ok is false unless every part is well formed
// (attempt >= 1, max_retries and timeout_ms >= 0, a non-empty type).
//
// It runs for every job a worker takes, on a fresh goroutine's small stack, so it is written
// with small frames and no calls into strconv.
func ParseEntryJob(s string) (attempt, maxRetries int, timeoutMS int64, typ string, ok bool) {
	a, i := leadingNumber(s, 0, 9)
	m, j := leadingNumber(s, i, 9)
	t, k := leadingNumber(s, j, 15)
	if a < 1 || m < 0 || t < 0 || k >= len(s) {
		return 0, 0, 0, "", false
	}
	return int(a), int(m), t, s[k:], true
}

// leadingNumber reads a decimal number of at most maxDigits digits starting at s[from]. A space
// must follow it. It returns the number and the index after the space, or -1.
func leadingNumber(s string, from, maxDigits int) (int64, int) {
	if from < 0 {
		return -1, -1
	}
	var n int64
	i := from
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if i-from == maxDigits {
			return -1, -1
		}
		n = n*10 + int64(s[i]-'0')
	}
	if i == from || i >= len(s) || s[i] != ' ' {
		return -1, -1
	}
	return n, i + 1
}

// Counter fields of a queue's stats hash.
const (
	StatEnqueued       = "enqueued"
	StatCompleted      = "completed"
	StatFailed         = "failed"  // jobs that went to the dead set, for any reason
	StatRetried        = "retried" // failed attempts that were scheduled again
	StatRecovered      = "recovered"
	StatDeadByRecovery = "dead_by_recovery"
	StatRefused        = "refused" // stale transitions refused by fencing
	StatCanceled       = "canceled"
	StatReleased       = "released" // put back by a worker shutting down
	StatPoison         = "poison"   // unreadable stream entries sent to the dead set
	StatLimited        = "limited"  // deferrals by a flow-control limit (admit.lua): no attempt
)

// StatDebounced counts the publishes that joined a pending debounced job (pipeline.WithDebounce)
// instead of creating one.
const StatDebounced = "debounced"

// StatRejectedFull counts the jobs a full queue refused (full_policy reject) and
// StatDroppedFull the waiting jobs it canceled to admit new ones (full_policy drop-oldest):
// enqueue.lua counts both in the step that checks the bound (docs/OPERATIONS.md, "Bounded
// queues").
const (
	StatRejectedFull = "rejected_full"
	StatDroppedFull  = "dropped_full"
)

// StatGroupWaiting is a gauge kept in the stats hash: how many of the queue's jobs wait, queued,
// for a place in their fair group's window (pipeline.WithGroup). The scripts that add to and
// take from the groups' wait lists move it in the same step.
const StatGroupWaiting = "group_waiting"

// DefaultGroupWindow is a fair group's window when none is set (Queue.GroupConfig). The window is
// how many of a group's jobs may be in the stream or running at once, times its weight.
//
// It is twice the worker's default concurrency. So one worker serving one group alone stays busy
// while its finished jobs' refills are on their way. (An outcome is written a flush interval after
// the handler returns.) And a new group's job waits behind at most 20 jobs of each other group.
// The function cv_group_room in groups.lua holds the same number.
const DefaultGroupWindow = 20

// The fields of a queue's group settings (Queue.GroupConfig): the window, and each group's
// weight under GroupWeightPrefix + group.
const (
	GroupWindowField  = "window"
	GroupWeightPrefix = "weight:"
)

// The names of a queue's group keys after GroupPrefix, and of its stats hash after Base. Lua
// builds the keys from them too (jobstate/lua/groups.lua), so they are named once here.
const (
	GroupKeyConfig   = "cfg"
	GroupKeyFlag     = "on"
	GroupKeyWindow   = "in:" // + group
	GroupKeyWaiting  = "w:"  // + group
	GroupKeyWaiters  = "ws"
	GroupKeyActive   = "as"
	GroupKeyStatsKey = "stats"
)

// Queue names the keys of one queue, or of one partition of a partitioned queue. New builds
// the names once, so a Queue kept by a client or worker costs no string building per job.
type Queue struct {
	name      string // the user's queue name, without the partition
	tag       string // what the hash tag holds: name, or name#i.s for partition i
	part      int    // the partition's number; 0 for an unpartitioned queue
	base      string // prefix:{tag}:
	stream    string
	scheduled string
	jobPrefix string
	dead      string
	stats     string
	wake      string
	closed    string
	level     int // the priority level of stream (AtLevel); 0 means 1
}

// New returns the keys of queue under prefix. queue is a queue name, or the name of one of its
// partitions (PartitionName: "q#i.s"), whose keys sit under the hash tag {q#i.s} while Name still
// says "q". It does not validate; see ValidateQueue and ValidatePartition.
func New(prefix, queue string) Queue {
	base := prefix + ":{" + queue + "}:"
	name, part := queue, 0
	if k := strings.LastIndexByte(queue, PartitionSep); k >= 0 {
		num, _, _ := strings.Cut(queue[k+1:], ".")
		if n, err := strconv.Atoi(num); err == nil {
			name, part = queue[:k], n
		}
	}
	return Queue{
		name: name, tag: queue, part: part, base: base,
		stream: base + "stream", scheduled: base + "scheduled", jobPrefix: base + "job:",
		dead: base + "dead", stats: base + GroupKeyStatsKey, wake: base + "wake", closed: base + "closed",
	}
}

// Name is the queue's name: the user's name, for a partition too ("q", not "q#1").
func (q Queue) Name() string { return q.name }

// Tag is what the keys' hash tag holds: the queue's name, or "q#i.s" for partition i.
func (q Queue) Tag() string { return q.tag }

// Partition is the partition's number, 0 for a queue that is not partitioned.
func (q Queue) Partition() int { return q.part }

// Base is what every one of the queue's keys starts with, "prefix:{queue}:".
func (q Queue) Base() string { return q.base }

// Stream is the stream of jobs ready to run.
func (q Queue) Stream() string { return q.stream }

// LevelStream is the stream that carries the queue's jobs of priority level p (FieldPriority). For
// level 1, and any p out of range, it is the queue's level-1 stream. For the others it is that +
// ":p<level>", on a level's view (AtLevel) as on the queue. So a queue whose jobs never name a
// level has the one stream it always had. The function cv_level_stream in entry.lua builds the same
// names.
func (q Queue) LevelStream(p int) string {
	if p <= MinPriority || p > MaxPriority {
		return q.base + "stream"
	}
	return q.base + "stream:p" + strconv.Itoa(p)
}

// AtLevel is the queue seen from its priority level p: the same keys, but Stream is
// LevelStream(p). A worker reads each level stream under such a view. So every script it runs with
// an entry in hand (finish, release, admit, recover) is given the stream that holds the entry.
// Level 1, or any p out of range, is the queue itself.
func (q Queue) AtLevel(p int) Queue {
	if p <= MinPriority || p > MaxPriority {
		p = MinPriority
	}
	q.level = p
	q.stream = q.LevelStream(p)
	return q
}

// Level is the priority level whose stream Stream is: 1 but for a view made by AtLevel.
func (q Queue) Level() int { return max(q.level, MinPriority) }

// Levels is the set of the priority levels above 1 (FieldPriority) that the queue's jobs were
// published with. The scripts enqueue.lua and debounce.lua add to it; only deleting the queue
// empties it. A worker reads a level's stream only once the level is in the set. So a queue whose
// jobs never named a level pays no reader, slot or call for levels. Its name is the level-1
// stream's plus ":levels", so a script given any level's stream finds it (entry.lua's cv_add_level).
func (q Queue) Levels() string { return q.base + "stream:levels" }

// Scheduled is the sorted set of job ids waiting for a time, scored by due time in unix ms.
func (q Queue) Scheduled() string { return q.scheduled }

// JobPrefix is the prefix of job hash keys; scripts that find job ids inside Redis (in the
// scheduled set or a stream entry) build keys from it. It shares the queue's hash tag.
func (q Queue) JobPrefix() string { return q.jobPrefix }

// Job is the hash holding job id's state.
func (q Queue) Job(id string) string { return q.jobPrefix + id }

// Logs is the list of job id's attempts' log lines (pipeline's Job.Logf), one item an attempt
// that logged, oldest first. It is apart from the job's hash so that the hash stays a compact
// listpack, and under "logs:", not "job:", so that no job id names it. It is written only when
// an attempt logged, and kept, expired and deleted with the hash.
func (q Queue) Logs(id string) string { return q.base + LogsInfix + id }

// LogsInfix is what a job's logs key has between its queue's base and its id (Logs); the
// scripts that delete or expire a job's hash build the logs key with it (lua/record.lua's
// cv_logs_key).
const LogsInfix = "logs:"

// Logged is the flag set by the queue's first attempt that logged. The script finish.lua
// expires a completed job's logs key with its hash only in a queue that has it, at one EXISTS
// a call. So a queue whose handlers never log pays no call a job for logs.
func (q Queue) Logged() string { return q.base + "logged" }

// Dead is the sorted set of ids of jobs that failed for good, scored by time of death.
func (q Queue) Dead() string { return q.dead }

// Completed is the index of the queue's completed jobs, for listing (pipeline.Inspector.List). It
// is a sorted set of chunks. Each chunk is the space-separated ids of one finish.lua call, but not
// those kept only as a tombstone. A chunk's score is the call's latest finish (unix ms). The count
// of its ids is at IndexCount(Completed()). The script finish.lua trims it to the retention and
// FinishedIndexCap (record.lua: cv_index). An id whose record expired is skipped when read.
func (q Queue) Completed() string { return q.base + "completed" }

// Canceled is Completed's twin for canceled jobs: cancel.lua adds each job it cancels.
func (q Queue) Canceled() string { return q.base + "canceled" }

// IndexCount is the key that counts the ids of index (Queue.Completed or Queue.Canceled),
// passed to the scripts beside it: a key in the same hash tag.
func IndexCount(index string) string { return index + ":n" }

// Workflow is the hash of workflow id (pipeline.Client.Workflow): its definition and counts.
// Its tasks are jobs of the same queue (partition), so one script reaches the workflow and
// every task in one cluster slot.
func (q Queue) Workflow(id string) string { return q.base + "wf:" + id }

// Workflows is the flag set by the first workflow published into the queue. The script finish.lua
// reads a finished job's workflow fields only in a queue that has it, at one EXISTS a call. That
// spares every other queue's jobs a read.
func (q Queue) Workflows() string { return q.base + "workflows" }

// WorkflowIndex lists the queue's workflows newest first: a sorted set of workflow ids scored
// by when each was published, trimmed to WorkflowIndexCap by workflow.lua. An id whose
// workflow expired stays until trimmed; readers skip it.
func (q Queue) WorkflowIndex() string { return q.base + "workflows:index" }

// WorkflowCascade is the queue's work list of workflow cascades. A script that ends tasks may
// follow only so many edges in one call (workflows.lua's cv_wf_follow). The dependents it did not reach
// are left here for later calls, and jobstate's FollowCascade goes on with them. The function
// cv_wf_follow builds the same name from the job prefix.
func (q Queue) WorkflowCascade() string { return q.base + "workflows:cascade" }

// WorkflowWaiting indexes the queue's workflow tasks whose status is waiting: a sorted set of
// job ids scored by the task's publish time (unix ms). Every script that moves a task into or
// out of waiting keeps it (workflow.lua, workflows.lua's cv_wf_release, cv_wf_follow and
// cv_wf_resume, cancel.lua), so its size is the waiting gauge (QueueStats.Waiting) and
// Inspector.List(waiting) pages it. The function cv_wf_waiting builds the same name from the
// job prefix.
func (q Queue) WorkflowWaiting() string { return q.base + "workflows:waiting" }

// WorkflowIndexCap bounds a queue's (partition's) WorkflowIndex, in ids.
const WorkflowIndexCap = 10000

// RecoveryLock is the key of the lock that lets one recoverer at a time scan the queue.
func (q Queue) RecoveryLock() string { return q.base + "lock:recovery" }

// Closed is the flag that refuses publishes to this queue or partition. Inspector.CreateQueue sets
// it on every partition of the layout that a change of the partition count leaves. So a producer
// still using that layout is refused, and reads the count again (enqueue.lua, enqueue1.lua). It
// expires: the refusal only has to outlast producers' caches.
func (q Queue) Closed() string { return q.closed }

// Stats is the hash of the queue's counters.
func (q Queue) Stats() string { return q.stats }

// UniquePrefix is the prefix of the queue's de-duplication keys.
func (q Queue) UniquePrefix() string { return q.base + "unique:" }

// Unique is the de-duplication key for a caller's unique key.
func (q Queue) Unique(key string) string { return q.base + "unique:" + key }

// Debounce is the key naming the pending job of a caller's debounce key (pipeline.WithDebounce).
// Its value is the id of the scheduled job that the key's next publish replaces. It shares the
// queue's hash tag, and so the slot of the job it names.
func (q Queue) Debounce(key string) string { return q.base + "debounce:" + key }

// DebounceKeyOf is the caller's debounce key in a debounce key's full name (Queue.Debounce),
// or "" when name is not one.
func DebounceKeyOf(name string) string {
	_, k, ok := strings.Cut(name, "}:debounce:")
	if !ok {
		return ""
	}
	return k
}

// Wake is the Pub/Sub channel on which scripts announce a new earliest due time, so delayed
// schedulers sleeping until a later time wake early. It is a channel, not a key.
func (q Queue) Wake() string { return q.wake }

// Events is the Pub/Sub channel on which the job-state scripts announce jobs' changes of status
// (internal/events). It carries the queue's hash tag, so a sharded publish (SPUBLISH) from a
// script stays on the node that holds the queue. It is a channel, not a key.
func (q Queue) Events() string { return q.base + "events" }

// Watching is set by the first read that marks one of the queue's jobs watched (FieldWatched). It
// stays until the queue goes. The script finish.lua looks for the marks only in a queue that has
// it. Asking every job's hash for a field it lacks made Redis scan the whole hash. That was a cost
// per job in every queue that nobody ever waited on (docs/BENCHMARKS.md).
func (q Queue) Watching() string { return q.base + "watching" }

// Limits is the hash of the queue's flow-control limits (pipeline.Limit), set by an operator
// and read by every worker: field LimitField(type, perKey), value the limit's JSON
// (jobstate.LimitConfig). Limits live in Redis, not in worker flags, so all workers obey the
// same ones and a change applies to all of them.
func (q Queue) Limits() string { return q.base + "limits" }

// LimitPrefix is the prefix of the keys that hold limits' state: a rate limit's log, the jobs
// holding a concurrency limit's slots, the jobs waiting for one. All are in the queue's hash tag.
// So the scripts that take and give back a limit are atomic with the job's move.
func (q Queue) LimitPrefix() string { return q.base + "limit:" }

// LimitWaiters is the set of the concurrency scope instances that have jobs waiting for a slot
// (lua/limits.lua's lp..'ws:').
func (q Queue) LimitWaiters() string { return q.LimitPrefix() + "ws:" }

// LimitWaiting is the list of the ids of the jobs waiting for a concurrency slot of scope
// instance inst, first come first woken (lua/limits.lua's lp..'w:'..inst). Those jobs are
// scheduled, out of the scheduled set.
func (q Queue) LimitWaiting(inst string) string { return q.LimitPrefix() + "w:" + inst }

// GroupPrefix is the prefix of the keys of the queue's fair groups (pipeline.WithGroup). Those are
// the settings, the set of each group's jobs in its window, and each group's wait list. Then the
// sets of the groups with waiting and with running jobs. Lua builds the same names from JobPrefix
// (jobstate/lua/groups.lua).
func (q Queue) GroupPrefix() string { return q.base + "group:" }

// GroupConfig is the hash of the queue's group settings, set by an operator
// (pipeline.Inspector.SetGroups): GroupWindowField, and GroupWeightPrefix + group for each
// weighted group.
func (q Queue) GroupConfig() string { return q.GroupPrefix() + GroupKeyConfig }

// Grouped is set by the queue's first job with a group. The script finish.lua looks for jobs'
// groups only in a queue that has it. So a queue without groups pays one EXISTS a call and no read
// a job.
func (q Queue) Grouped() string { return q.GroupPrefix() + GroupKeyFlag }

// GroupWindow is the set of the ids of group g's jobs in its window.
func (q Queue) GroupWindow(g string) string { return q.GroupPrefix() + GroupKeyWindow + g }

// GroupWaiting is the list of the ids of group g's jobs waiting for a place, oldest first.
func (q Queue) GroupWaiting(g string) string { return q.GroupPrefix() + GroupKeyWaiting + g }

// GroupsWaiting is the set of the groups that have waiting jobs.
func (q Queue) GroupsWaiting() string { return q.GroupPrefix() + GroupKeyWaiters }

// GroupsActive is the set of the groups that have jobs in their window.
func (q Queue) GroupsActive() string { return q.GroupPrefix() + GroupKeyActive }

// ValidateGroup reports whether g can be a fair group's name (pipeline.WithGroup): the rules of
// a job id, 1 to MaxNameLen characters from [A-Za-z0-9._:-].
func ValidateGroup(g string) error {
	if err := validName(g, true); err != nil {
		return fmt.Errorf("invalid group %q: %w", g, err)
	}
	return nil
}

// KeyWaiting is the queue's (partition's) count of unfinished jobs per limit key, for its
// max_waiting_per_key (docs/OPERATIONS.md, "Bounded queues"): a hash of field limit key, value
// the key's jobs published and not yet completed, dead or canceled that enqueue.lua counted
// (FieldKeyCounted). A field goes when its count reaches 0, so the key exists only while a
// counted job lives, and one EXISTS tells a script ending jobs whether to look for marks.
// lua/keywait.lua builds the same name from the job prefix (QueueKeyKeyWait).
func (q Queue) KeyWaiting() string { return q.base + QueueKeyKeyWait }

// QueueKeyKeyWait is KeyWaiting's name after the queue's base.
const QueueKeyKeyWait = "keywait"

// Queues is the set of known queue names under prefix.
func Queues(prefix string) string { return prefix + ":queues" }

// Partitions is the hash of the partition counts of queues under prefix: field queue name,
// value P. A queue with no field has one partition, whose keys are the plain prefix:{q}:...
// Like Queues it is global and never touched by a script.
func Partitions(prefix string) string { return prefix + ":partitions" }

// Paused is the set of the names of the paused queues under prefix (Inspector.Pause). A worker
// issues no read on any partition of a queue in it. Like Queues it is global, and no script
// touches it. Every worker reads it whole every second, and when a notice on PausedChannel says it
// changed. It is kept across restarts like any key.
func Paused(prefix string) string { return prefix + ":paused" }

// PausedChannel is the Pub/Sub channel on which a pause or resume is announced. So workers need
// not wait for their next read of Paused. The message is the queue's name; for a pause, a space
// and the pause's token (PauseAcks) follow. A notice is a hint; Paused is the state.
func PausedChannel(prefix string) string { return prefix + ":paused:notices" }

// PauseAcks is the hash in which the workers that read queue confirm a pause of it
// (Inspector.Pause). The field is the worker's name, the value the token of the pause it applied
// (from the notice). A worker writes it once its reads of the queue under way have ended. Global
// like Paused, and short-lived: it expires a minute after the last confirmation.
func PauseAcks(prefix, queue string) string { return prefix + ":paused:acks:" + queue }

// PauseAckChannel is the Pub/Sub channel on which a worker announces each confirmation it writes
// to PauseAcks. The message is the pause's token, a space and the worker's name. So the pause
// waiting for it wakes at once, instead of reading PauseAcks over and over. A notice is a hint;
// PauseAcks is the state.
func PauseAckChannel(prefix string) string { return prefix + ":paused:acked" }

// The keys of periodic schedules (pipeline.Periodic, internal/periodic) share one hash tag,
// "{:schedules}". No queue's tag can equal it, since ':' is not allowed in a queue name. So a
// script or transaction may touch a schedule's definition, state and pause together on a cluster.
// And they never meet a queue's keys.
func schedulesBase(prefix string) string { return prefix + ":{:schedules}:" }

// Schedules is the hash of the stored periodic schedules under prefix: field the schedule's
// name, value its definition's JSON (periodic.Def). Every worker's scheduler runs what it
// holds, so a schedule added here needs no deploy.
func Schedules(prefix string) string { return schedulesBase(prefix) + "defs" }

// SchedulesPaused is the set of the names of the paused schedules under prefix. It is kept
// apart from the definitions so that a worker registering its own schedules again at start
// does not resume one an operator paused.
func SchedulesPaused(prefix string) string { return schedulesBase(prefix) + "paused" }

// ScheduleState is the hash of one schedule's progress: the last tick handled, the last job
// enqueued and when (periodic.State).
func ScheduleState(prefix, name string) string { return schedulesBase(prefix) + "state:" + name }

// The fields of a ScheduleState hash, which advance.lua writes. They hold the last tick handled,
// and the last job enqueued: its id, its tick and when (unix ms). Gen counts the changes of the
// definition and pause. So a scheduler does not index a schedule by what it read before one.
const (
	ScheduleFieldLast = "last"
	ScheduleFieldJob  = "job"
	ScheduleFieldTick = "tick"
	ScheduleFieldAt   = "at"
	ScheduleFieldGen  = "gen"
)

// SchedulesDue is the due index of the schedules under prefix. It is a sorted set of the names of
// the schedules that are not paused. Each is scored by when it must next be looked at, in unix ms:
// its next tick, or 0 for "now" once it was stored or resumed.
//
// A score may be early, never late. The one exception is a schedule whose ticks fail: it is put
// back by a second. A scheduler reads only the schedules whose score is due, and sets each one's
// score again.
func SchedulesDue(prefix string) string { return schedulesBase(prefix) + "due" }

// SchedulesNames is the sorted set of the names of the stored schedules under prefix, all of
// score 0. So they are listed by name a page at a time (ZRANGE BYLEX).
func SchedulesNames(prefix string) string { return schedulesBase(prefix) + "names" }

// SchedulesLock is the lock whose holder runs schedules' ticks on time. The others step in only
// when a tick is overdue. In internal/periodic the lock is an efficiency; the per-tick job id is
// the guarantee.
func SchedulesLock(prefix string) string { return schedulesBase(prefix) + "lock" }

// The keys of the workers' heartbeat records (pipeline.Inspector.Workers) share one hash tag,
// "{:workers}". No queue's tag can equal it, since ':' is not allowed in a queue name. So a
// worker's beat writes its record and the index in one pipeline to one node of a cluster. And a
// listing reads every record from that node.
func workersBase(prefix string) string { return prefix + ":{:workers}:" }

// Workers is the sorted set of the workers that beat under prefix: member a worker's name,
// score the unix ms (the writer's clock) at which its record expires. It only points at the
// records: a beat prunes members expired a minute ago, a listing those whose record is gone.
func Workers(prefix string) string { return workersBase(prefix) + "index" }

// WorkerBeat is the heartbeat record of the worker named name, a string holding its JSON. It is
// written every beat with a TTL of a few beats, by Redis's clock, and deleted when the worker
// stops.
func WorkerBeat(prefix, name string) string { return workersBase(prefix) + "w:" + name }

// SeenQueues is the sorted set of the queues the workers' beats have named under prefix:
// member a queue, score the unix ms (Redis's clock) of the last beat of a worker that reads it.
// SeenTypes is the same of the job types the workers have handlers for. They outlive the
// records, whose TTL is a few beats, so that a publish can be told that nothing has read its
// queue or handled its type for minutes (pipeline.Inspector.PublishWarnings). Each beat drops
// the members older than a day, so neither grows past the names in use that day.
func SeenQueues(prefix string) string { return workersBase(prefix) + "seen:queues" }

// SeenTypes is SeenQueues of the job types the workers handle.
func SeenTypes(prefix string) string { return workersBase(prefix) + "seen:types" }

// MaxScheduleLen bounds a schedule's name, so that its per-tick job id ("cron:" name ":" unix
// seconds) fits a job id's MaxNameLen.
const MaxScheduleLen = 64

// ValidateSchedule reports whether name can be a schedule's name: 1 to MaxScheduleLen
// characters from [A-Za-z0-9._-] (no ':', which separates the parts of the per-tick job id).
func ValidateSchedule(name string) error {
	if err := validName(name, false); err != nil {
		return fmt.Errorf("invalid schedule name %q: %w", name, err)
	}
	if len(name) > MaxScheduleLen {
		return fmt.Errorf("invalid schedule name %q: longer than %d bytes", name, MaxScheduleLen)
	}
	return nil
}

// LayoutLock is the lock that lets one change of queue's partition count run at a time.
func LayoutLock(prefix, queue string) string { return Partitions(prefix) + ":lock:" + queue }

// PartitionSep separates a queue's name from a partition's number in the partition's hash tag;
// ValidateQueue refuses it in queue names, so "q#1" can name nothing but a partition.
const PartitionSep = '#'

// MaxPartitions bounds a queue's partition count. A worker holds a stream subscription, a
// scheduler slot and a recoverer per partition. And a lookup by id may try every partition.
const MaxPartitions = 1024

// PartitionName is the internal name of partition i of queue's p. It is "queue#i.s" when the
// queue has more than one partition (p > 1). A queue of one partition keeps its own name, and so
// the plain keys it always had.
//
// The suffix s, three characters or a few more, makes the tag's slot (Slot) the middle slot of
// the i-th of p equal shares of the 16,384 slots (slotMid). A cluster's default layout gives
// each of its M masters one contiguous, equal run of slots. So with p a multiple of M, each
// master holds p/M partitions. With any p >= M, each master holds at least one
// (TestPartitionSlotsSpread checks M up to 16). The name depends on queue, i and p alone: every
// process finds the same. It is memoized per (queue, p).
func PartitionName(queue string, i, p int) string {
	if p <= 1 {
		return queue
	}
	return partitionTags(queue, p)[i]
}

// tagMemo holds the partition tags of every (queue, p) asked for: there is one entry per
// partitioned queue and count in use, since a plain queue computes nothing.
var tagMemo sync.Map // queue + "#" + p -> []string

func partitionTags(queue string, p int) []string {
	memo := queue + string(PartitionSep) + strconv.Itoa(p)
	if v, ok := tagMemo.Load(memo); ok {
		return v.([]string)
	}
	tags := make([]string, p)
	for i := range tags {
		tags[i] = spreadTag(queue, i, p)
	}
	v, _ := tagMemo.LoadOrStore(memo, tags)
	return v.([]string)
}

// spreadTag is the tag of partition i of p (PartitionName): "queue#i." and the first suffix, in
// the order of suffixes, whose tag falls in slot mid (slotMid).
//
// CRC16 is linear. The CRC after a suffix s of three characters is the CRC of three zero bytes
// after the head's, XOR the CRC of s alone. So one table of every three-character suffix by its
// own CRC (suffixTable) answers for every head at once. The four CRCs whose low 14 bits are mid
// each name at most one suffix. The table misses about 2% of the CRCs. When none of the four is
// in it, a longer prefix goes before the three characters, in order, until one is.
func spreadTag(queue string, i, p int) string {
	mid := slotMid(i, p)
	head := queue + string(PartitionSep) + strconv.Itoa(i) + "."
	crc := crc16(0, head)
	table := suffixTable()
	for k := 0; ; k++ {
		pre := suffixPrefix(k)
		z := crc16(crc16(crc, pre), "\x00\x00\x00")
		for top := range 4 {
			if n := table[uint16(top<<14|mid)^z]; n > 0 {
				n--
				return head + pre + string([]byte{tagAlphabet[n>>12], tagAlphabet[n>>6&63], tagAlphabet[n&63]})
			}
		}
	}
}

// tagAlphabet is what a partition tag's suffix is made of: characters a queue name may hold,
// but neither the '.' before the suffix nor PartitionSep.
const tagAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"

// suffixTable maps a CRC16 to 1 + the number of the first three-character suffix whose CRC from
// 0 it is, or 0 when none is. The number is c0<<12 | c1<<6 | c2, in tagAlphabet. The table is
// 256 KiB, built once per process that names a partition (about 6 ms; BenchmarkSuffixTable).
var suffixTable = sync.OnceValue(buildSuffixTable)

func buildSuffixTable() *[1 << 16]uint32 {
	t := new([1 << 16]uint32)
	for n := range 64 * 64 * 64 {
		c := crc16(0, string([]byte{tagAlphabet[n>>12], tagAlphabet[n>>6&63], tagAlphabet[n&63]}))
		if t[c] == 0 {
			t[c] = uint32(n + 1)
		}
	}
	return t
}

// suffixPrefix is the k-th string over tagAlphabet in the order "", "A", ..., "-", "AA", ...
func suffixPrefix(k int) string {
	var b []byte
	for ; k > 0; k = (k - 1) / 64 {
		b = append([]byte{tagAlphabet[(k-1)%64]}, b...)
	}
	return string(b)
}

// slotMid is the slot partition i of p takes: the middle of the i-th of p equal shares of the
// slots. Any other slot fails some layout. Take 13 partitions over 12 masters: the middle of
// partition 6's share is slot 8192, the first of the 7th master's run. A tag a slot lower would
// leave that master without a partition.
func slotMid(i, p int) int { return (2*i + 1) * Slots / (2 * p) }

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag, the part between
// the first '{' and the next '}' when that is not empty, or of the whole key, modulo 16,384.
func Slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(0, key)) % Slots
}

func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

// crc16Table is the table of CRC16-CCITT (XMODEM, polynomial 0x1021), the CRC Redis Cluster
// uses for key slots.
var crc16Table = func() (t [256]uint16) {
	for n := range t {
		c := uint16(n) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[n] = c
	}
	return t
}()

// PartitionOf is the partition, of p, that a routing key goes to: FNV-1a (32 bits) of the key,
// modulo p. It is stable across versions and processes: every producer routes a key alike.
func PartitionOf(key string, p int) int {
	if p <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(p))
}

// ValidatePartition reports whether name is a queue name or the name of one of its partitions:
// the names the scheduler and the recoverer accept. A partition's name is "q#i.s"
// (PartitionName). Here i is below MaxPartitions, decimal without leading zeros, and s is 3 to 8
// characters of the suffix alphabet.
func ValidatePartition(name string) error {
	k := strings.LastIndexByte(name, PartitionSep)
	if k < 0 {
		return ValidateQueue(name)
	}
	if err := ValidateQueue(name[:k]); err != nil {
		return err
	}
	num, suffix, dot := strings.Cut(name[k+1:], ".")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= MaxPartitions || strconv.Itoa(n) != num || !dot ||
		len(suffix) < 3 || len(suffix) > 8 || strings.Trim(suffix, tagAlphabet) != "" {
		return fmt.Errorf("invalid partition %q: want queue#N.S with N in 0..%d", name, MaxPartitions-1)
	}
	return nil
}

// ValidateQueue reports whether name can be a queue name: 1 to MaxNameLen characters from
// [A-Za-z0-9._-]. Braces would break the hash tag, ':' the key layout and '#' is kept for
// partitions.
func ValidateQueue(name string) error {
	if err := validName(name, false); err != nil {
		return fmt.Errorf("invalid queue name %q: %w", name, err)
	}
	return nil
}

// ValidateID reports whether id can be a job id: 1 to MaxNameLen characters from
// [A-Za-z0-9._:-] (so UUIDs, ULIDs and ids such as "order:42" fit).
func ValidateID(id string) error {
	if err := validName(id, true); err != nil {
		return fmt.Errorf("invalid job id %q: %w", id, err)
	}
	return nil
}

// ValidID is ValidateID as a predicate, for hot paths that only need the answer.
func ValidID(id string) bool { return validName(id, true) == nil }

func validName(s string, colon bool) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("longer than %d bytes", MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		case c == ':' && colon:
		default:
			// Name the character as typed, not the first byte of its UTF-8 encoding.
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size <= 1 {
				return fmt.Errorf("byte '\\x%02x' (not UTF-8) not allowed", c)
			}
			return fmt.Errorf("character %q not allowed", r)
		}
	}
	return nil
}

// The fields of a history bucket (Queue.History, HistoryAll). They hold the outcomes the workers
// wrote in the bucket's time, and two histograms: queue wait and execution time. Each non-empty
// cell is one field: HistoryWait or HistoryExec followed by the cell's number. The cells are
// pipeline's histogram's: log-scale cells of milliseconds, four to a doubling. The names are
// short because a bucket is a small hash and there are many of them.
const (
	HistoryCompleted = "c"
	HistoryFailed    = "f" // went to the dead set
	HistoryRetried   = "r"
	HistoryWait      = "w" // + cell: publish (or promotion) to handler start
	HistoryExec      = "x" // + cell: handler start to end
)

// History is the hash of the queue's outcomes in one bucket of its history. res names the
// resolution ("5s", "1m"); start is the bucket's start in unix seconds. One small hash a bucket,
// with an expiry, keeps the history bounded without any pruning: a bucket's key expires when it
// leaves its resolution's span. It is under the queue's own hash tag, not a partition's, because
// the history is the queue's. So a cluster spreads the histories with the queues.
func (q Queue) History(res string, start int64) string {
	return q.base + "history:" + res + ":" + strconv.FormatInt(start, 10)
}

// HistoryAll is History summed over every queue, which the workers write beside each queue's. So
// the history of all queues is one read however many queues there are. Its hash tag "{:history}"
// is no queue's, since ':' is not allowed in a queue name.
func HistoryAll(prefix, res string, start int64) string {
	return prefix + ":{:history}:" + res + ":" + strconv.FormatInt(start, 10)
}
