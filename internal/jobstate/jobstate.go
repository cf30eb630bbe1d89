// Package jobstate is the job state machine. It holds every Lua script that moves a job from
// one status to another, each one atomic step over a queue's keys. It also holds the Go that
// builds their calls and reads their replies. A map of every status (package status) and
// transition is in docs/STATE_MACHINE.md.
//
// # Store
//
// Every call is a method of Store (store.go), which holds the client, the key prefix and the
// cluster mode. Pipeline reaches it through the Backend interface (backend.go).
//
// Every transition a worker asks for is a value made by one constructor (Start, Done, Retry,
// Dead, Poison). The script finish.lua applies them in batches (Store.Finish, Batch.Finish),
// fenced by the stream entry the worker was handed.
//
// The other transitions are methods of their own. Release, Cancel, Replay and Purge are for
// pipeline. Promote is for package delayed's Scheduler. Recover, Prune and Clock are for
// package recovery's Recoverer (maintain.go). The services keep their loops, clocks and
// backoffs. What a script does and how its reply reads is here.
//
// # Queue settings
//
// A queue's settings live in two places. The settings record (settings.go) holds the pause and
// the job defaults. The partition count, the limits and the group settings stay beside the
// jobs, where the scripts read them atomically with a job's move. Their changes are methods
// here too (queue_change.go): the layout lock, a change of the partition count with its drain,
// the bounds on limits and weights. They are rules of the state, which a store a test double
// wraps must keep. pipeline.Inspector checks its callers' input.
//
// # Params and replies
//
// A call takes its settings as a params struct (StartParams, DoneParams, CancelParams,
// RecoverParams, ...). Its fields are named time.Time and time.Duration values, never a run of
// positional milliseconds. The call converts them to the scripts' unix milliseconds itself.
// Every reply is read by one decoder (reply.go) into a typed answer (Row, Created, Released,
// Promoted, Recovered). No caller sees a raw reply.
//
// # Lua
//
// Every transition's Lua is here. The functions the scripts share are in lua/, one file a
// concern. The concerns are the fence of every transition that holds an entry (cv_live), the
// entry, the record, the dead set, limits, groups and workflows. Each script gets only the
// functions it calls (newScript joins them in).
//
// Package internal/script runs the scripts and keeps the reply codes (script.Code). It knows
// no job: a status quoted outside this package's Lua fails a test.
//
// # Who uses it
//
// The package is internal. Pipeline (Client, Worker, Inspector), the services and the tests
// of every package share it. Package internal/jobtest seeds jobs in any status through these
// very scripts. Nothing outside the module builds a transition.
package jobstate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed enqueue.lua
	enqueueSrc string
	//go:embed enqueue1.lua
	enqueue1Src string
	//go:embed finish.lua
	finishSrc string
	//go:embed get.lua
	getSrc string
	//go:embed cancel.lua
	cancelSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed replay.lua
	replaySrc string
	//go:embed purge.lua
	purgeSrc string
	//go:embed foreign.lua
	foreignSrc string
	//go:embed run_now.lua
	runNowSrc string
	//go:embed debounce.lua
	debounceSrc string

	enqueueScript  = newScript(enqueueSrc)
	enqueue1Script = newScript(enqueue1Src)
	finishScript   = newScript(finishSrc)
	getScript      = newScript(getSrc)
	cancelScript   = newScript(cancelSrc)
	releaseScript  = newScript(releaseSrc)
	replayScript   = newScript(replaySrc)
	purgeScript    = newScript(purgeSrc)
	foreignScript  = newScript(foreignSrc)
	debounceScript = newScript(debounceSrc)
	runNowScript   = newScript(runNowSrc)
)

// WorkerScripts are the scripts a worker runs pipelined, which must be loaded first (a
// pipelined EVALSHA does not fall back to EVAL by itself).
func WorkerScripts() []*script.Script {
	return []*script.Script{finishScript, releaseScript, admitScript, leasesScript}
}

// IsFinishCall reports whether a command's arguments are an EVALSHA of finish.lua, for tests
// that make its writes fail.
func IsFinishCall(args []any) bool {
	return len(args) > 1 && finishScript.Is(args[1])
}

// DeadEntryPrefix starts the id of the dead record kept for a stream entry that names no job
// of its own (no valid id, or an id whose job lives on another entry): "entry-<entry id>".
const DeadEntryPrefix = "entry-"

// ---- Creating jobs ----

// NewJob is a job for enqueue.lua to create.
type NewJob struct {
	ID         string
	Type       string
	Payload    []byte
	Metadata   string // encoded (stream.EncodeMetadata), or empty
	MaxRetries int
	Timeout    time.Duration // 0: none; under a millisecond counts as one
	RunAt      time.Time     // at or before now queues the job, later schedules it
	// Retention is how long the finished job is kept, when KeepOwn says the job has a retention
	// of its own (0: deleted at once); without KeepOwn the worker's default applies.
	Retention time.Duration
	KeepOwn   bool
	UniqueKey string        // the caller's unique key (not the Redis key); empty: none
	UniqueTTL time.Duration // with UniqueKey; under a millisecond counts as one
	ChosenID  bool          // the caller chose the id: it is looked up on its own
	// Debounce is the caller's debounce key (pipeline.WithDebounce): the job is published by
	// debounceCall (debounce.lua), never by enqueueCall or Enqueue1. Empty: none.
	Debounce                       string
	DebounceQuiet, DebounceMaxWait time.Duration
	LimitKey                       string // the key per-key limits count the job under; empty: none
	// Group is the job's fair group (pipeline.WithGroup; keys.FieldGroup); empty: none. A
	// grouped job to run at once enters its group's window or waits for a place (queued with
	// no entry: Created.Entry is empty).
	Group string
	// Priority is the job's level within its queue, keys.MinPriority (the default; 0 counts as
	// it) to keys.MaxPriority: a job above level 1 is queued in its level's stream.
	Priority int
}

// Plain reports whether Enqueue1 can create j. That is a job to run at once (RunAt at or
// before now, to the millisecond), at priority level 1. It has no unique key, limit key,
// timeout or retention of its own. (The script enqueue1.lua writes to the level-1 stream only.)
func (j *NewJob) Plain(now time.Time) bool {
	return !j.KeepOwn && j.UniqueKey == "" && j.LimitKey == "" && j.Timeout <= 0 && j.RunAt.UnixMilli() <= now.UnixMilli() &&
		j.Debounce == "" && j.Group == "" && j.Priority <= keys.MinPriority
}

// priorityArg is a job's priority level as enqueue.lua and debounce.lua take it: empty for
// level 1, which writes no field.
func priorityArg(p int) string {
	if p <= keys.MinPriority || p > keys.MaxPriority {
		return ""
	}
	return strconv.Itoa(p)
}

// ErrClosed is what enqueueReply and Enqueue1 return when the queue or partition written to is
// closed (keys.Queue.Closed): its queue's partition count changed, and nothing was written.
var ErrClosed = errors.New("the queue's partition layout is closed: its partition count changed")

// Bound is a publish's bound on the waiting jobs of the queue or partition it writes to
// (docs/OPERATIONS.md, "Bounded queues"). The zero Bound is none: enqueue.lua then counts
// nothing. The other fields are what a drop's cancel takes (CancelParams).
type Bound struct {
	// MaxWaiting is the most jobs that may wait in the queue or partition; 0: no bound.
	MaxWaiting int
	// MaxWaitingPerKey is the most unfinished jobs of one limit key (NewJob.LimitKey) the
	// queue or partition may hold; 0: no bound, and enqueue.lua counts nothing per key. A
	// job at it is refused (script.Full, Created.KeyFull) whatever DropOldest says.
	MaxWaitingPerKey int
	// DropOldest cancels the oldest ready job to admit a new one at the bound; false refuses
	// the new one (script.Full).
	DropOldest bool
	// Retention and MinRetention keep a dropped job's record as a cancel's (CancelParams).
	Retention, MinRetention time.Duration
	// Events is the mode a drop is announced in.
	Events events.Mode
	// IndexCap bounds the index of canceled jobs, as CancelParams.IndexCap.
	IndexCap int
}

// enqueueCall is one enqueue.lua call creating jobs in q (see the script for what it answers).
func enqueueCall(q keys.Queue, now time.Time, jobs []NewJob, bound *Bound) script.Call {
	ks := make([]string, 0, 6+2*len(jobs))
	ks = append(ks, q.Stream(), q.Scheduled(), q.Stats(), q.Canceled(), keys.IndexCount(q.Canceled()))
	args := make([]any, 0, 14+12*len(jobs))
	chosen := make([]byte, len(jobs))
	witness := 0
	// A job with a unique key may be refused (its key held) and so never created; it cannot
	// witness for the others, nor can another job witness for it. Such a chunk looks every job
	// up on its own.
	perJob := slices.ContainsFunc(jobs, func(j NewJob) bool { return j.UniqueKey != "" })
	for i := range jobs {
		j := &jobs[i]
		ks = append(ks, q.Job(j.ID))
		chosen[i] = '0'
		if j.ChosenID || perJob {
			chosen[i] = '1'
		} else {
			witness = len(ks) // 1-based index in KEYS of the last generated-id job
		}
		if j.UniqueKey != "" {
			ks = append(ks, q.Unique(j.UniqueKey))
		}
	}
	ks = append(ks, q.Closed())
	args = append(args, now.UnixMilli(), q.Wake(), witness, string(chosen), q.JobPrefix())
	if bound == nil || bound.MaxWaiting <= 0 {
		args = append(args, "0", "", "", "", "", "", "", "")
	} else {
		policy := "reject"
		if bound.DropOldest {
			policy = "drop-oldest"
		}
		args = append(args, bound.MaxWaiting, policy, keys.Group, retentionMS(bound.Retention),
			bound.MinRetention.Milliseconds(), bound.Events.Command(), q.Events(), indexCap(bound.IndexCap))
	}
	if bound == nil || bound.MaxWaitingPerKey <= 0 {
		args = append(args, "0")
	} else {
		args = append(args, bound.MaxWaitingPerKey)
	}
	for i := range jobs {
		j := &jobs[i]
		uttl, ret := "", ""
		if j.UniqueKey != "" {
			uttl = strconv.FormatInt(max(1, j.UniqueTTL.Milliseconds()), 10)
		}
		if j.KeepOwn {
			ret = strconv.FormatInt(retentionMS(j.Retention), 10)
		}
		args = append(args, j.ID, j.Type, j.Payload, j.Metadata, j.MaxRetries, retentionMS(j.Timeout),
			j.RunAt.UnixMilli(), ret, uttl, j.LimitKey, j.Group, priorityArg(j.Priority))
	}
	return script.Call{Script: enqueueScript, Keys: ks, Args: args}
}

// Created is what enqueue.lua did with one job. Code is one of four. It is script.OK when
// the job was created. Entry is then the new stream entry, or empty when the job was scheduled
// or waits for a place in its group's window. It is script.Exists when the id exists already,
// with the same type and payload. It is script.Conflict when the id names a job with another
// type or payload; Differs says which. It is script.UniqueHeld when Holder holds the unique
// key. It is script.Full when the queue held its bound of waiting jobs (Bound) and the job
// was not written; Waiting is then how many jobs waited, or, when KeyFull, how many
// unfinished jobs of the job's limit key there were (Bound.MaxWaitingPerKey).
type Created struct {
	Code    script.Code
	Entry   string
	Holder  string
	Differs string
	Waiting int64
	KeyFull bool
}

// enqueueReply reads the reply of an enqueueCall of n jobs.
func enqueueReply(cmd *redis.Cmd, n int) ([]Created, error) {
	r, err := decode("enqueue", cmd)
	if err == nil && r.code == script.WrongState {
		return nil, ErrClosed
	}
	if err == nil {
		err = r.want(2 * n)
	}
	if err != nil {
		return nil, err
	}
	out := make([]Created, n)
	for k := range out {
		data := r.str(2*k + 1)
		out[k].Code = script.Code(r.int(2 * k))
		switch out[k].Code {
		case script.OK:
			out[k].Entry = data
		case script.UniqueHeld:
			out[k].Holder = data
		case script.Conflict:
			out[k].Differs = data
		case script.Full:
			// 'key:' and a count: the job's limit key held its bound (enqueue.lua).
			if rest, ok := strings.CutPrefix(data, "key:"); ok {
				out[k].KeyFull, data = true, rest
			}
			out[k].Waiting, _ = strconv.ParseInt(data, 10, 64)
		case script.Exists:
		default:
			return nil, fmt.Errorf("enqueue: unexpected reply code %v", out[k].Code)
		}
	}
	return out, nil
}

// Enqueue1 creates one plain job (see NewJob.Plain) with enqueue1.lua. That script costs Redis
// half of what enqueue.lua does for a single publish. It answers with a bare entry id instead
// of {code, ...}, which costs a single publish 5% less (docs/BENCHMARKS.md). It answers as one
// row of enqueueReply.
func (s *Store) Enqueue1(ctx context.Context, q keys.Queue, now time.Time, j *NewJob) (Created, error) {
	return s.enqueue1(enqueue1Script.Run(ctx, s.rdb, []string{q.Stream(), q.Stats(), q.Job(j.ID), q.Closed()},
		j.ID, j.Type, j.Payload, j.Metadata, j.MaxRetries, now.UnixMilli()))
}

// Enqueue1Bounded is Enqueue1 into a queue (or partition) that holds at most maxWaiting
// waiting jobs and refuses the job at the bound (script.Full, with Created.Waiting): the
// policy reject. A drop-oldest bound goes through enqueue.lua, which has the cancel's steps.
func (s *Store) Enqueue1Bounded(ctx context.Context, q keys.Queue, now time.Time, j *NewJob, maxWaiting int) (Created, error) {
	return s.enqueue1(enqueue1Script.Run(ctx, s.rdb, []string{q.Stream(), q.Stats(), q.Job(j.ID), q.Closed(), q.Scheduled()},
		j.ID, j.Type, j.Payload, j.Metadata, j.MaxRetries, now.UnixMilli(), maxWaiting, keys.Group))
}

// enqueue1 reads enqueue1.lua's reply.
func (s *Store) enqueue1(cmd *redis.Cmd) (Created, error) {
	if e, ok := cmd.Val().(string); ok {
		return Created{Code: script.OK, Entry: e}, nil
	}
	row, err := decodeRow("enqueue", cmd)
	if err != nil {
		return Created{}, err
	}
	switch row.Code {
	case script.Exists:
		return Created{Code: script.Exists}, nil
	case script.Conflict:
		return Created{Code: script.Conflict, Differs: row.Data}, nil
	case script.WrongState:
		return Created{}, ErrClosed
	case script.Full:
		n, _ := strconv.ParseInt(row.Data, 10, 64)
		return Created{Code: script.Full, Waiting: n}, nil
	}
	return Created{}, fmt.Errorf("enqueue1: unexpected reply %v", row)
}

// ---- Reading ----

// getCall is Get as a call for a pipeline (script.Pipelined); getReply reads its reply.
func getCall(q keys.Queue, id string) script.Call {
	return script.Call{Script: getScript, Keys: []string{q.Job(id), q.Stream()}}
}

// getReply reads the reply of a getCall (see Get).
func getReply(cmd *redis.Cmd) (flat []string, found bool, err error) {
	r, err := decode("get", cmd)
	if err != nil || r.code == script.NotFound {
		return nil, false, err
	}
	return r.strs(0), true, nil
}

// Get reads job id's record as a flat field/value list. While the job is in the stream, its
// payload and metadata come from its stream entry. found is false when there is no such job.
func (s *Store) Get(ctx context.Context, q keys.Queue, id string) (flat []string, found bool, err error) {
	return getReply(getScript.Run(ctx, s.rdb, []string{q.Job(id), q.Stream()}))
}

// GetWatched is Get that also marks the job watched (keys.FieldWatched), in the same script:
// finish.lua announces the outcome of a marked job only. A waiter calls it once subscribed to
// the job's events, so that an outcome is either in what it reads or announced after.
func (s *Store) GetWatched(ctx context.Context, q keys.Queue, id string) (flat []string, found bool, err error) {
	return getReply(getScript.Run(ctx, s.rdb, []string{q.Job(id), q.Stream(), q.Watching()}, "1"))
}
