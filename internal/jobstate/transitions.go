package jobstate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// Op is a worker transition of finish.lua.
type Op uint8

// The worker transitions. A value of each is made by its constructor.
const (
	OpStart  Op = iota + 1 // the attempt began: in_progress
	OpDone                 // the attempt completed: completed
	OpRetry                // the attempt failed: scheduled for RetryAt, or failed when out of retries
	OpDead                 // the attempt failed for good: failed, in the dead set
	OpPoison               // the entry could not be read: a dead record
)

// opNames are finish.lua's names of the ops.
var opNames = [...]string{OpStart: "start", OpDone: "done", OpRetry: "retry", OpDead: "dead", OpPoison: "poison"}

// OpNames are finish.lua's names of the ops, for tests that check the scripts.
func OpNames() []string {
	var out []string
	for _, n := range opNames {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Transition is one state change a worker asks for, fenced by the stream entry it was handed.
// Make one with Start, Done, Retry, Dead or Poison; the fields a constructor does not set are
// unused by its op.
type Transition struct {
	Queue    *keys.Queue // shared, not copied: every job makes several transitions
	Op       Op
	ID       string
	Entry    string
	Attempt  int
	Started  int64  // unix ms
	Finished int64  // unix ms
	Result   string // Done
	Reason   string // Retry, Dead, Poison: the error
	RetryAt  int64  // Retry: the due time, unix ms
	// Payload is the job's payload exactly as read from its entry, sent back with an outcome
	// so that finish.lua need not read the entry again (WithPayload).
	Payload     string
	PayloadSent bool
	// Type is the job's type, for log lines only: it is not sent to Redis.
	Type string
	// Began (when the worker began handling the attempt) and Note (what else its hooks need
	// to know, pipeline's business) are for the worker's metrics; neither is sent to Redis.
	Began time.Time
	Note  uint8
}

// Start marks attempt as running since at.
func Start(q *keys.Queue, id, entry string, attempt int, at int64) Transition {
	return Transition{Queue: q, Op: OpStart, ID: id, Entry: entry, Attempt: attempt, Started: at}
}

// Done completes the job with result.
func Done(q *keys.Queue, id, entry string, attempt int, started, finished int64, result string) Transition {
	return Transition{Queue: q, Op: OpDone, ID: id, Entry: entry, Attempt: attempt, Started: started,
		Finished: finished, Result: result}
}

// Retry records a failed attempt and schedules the job for at, or sends it to the dead set when
// the attempt was its last.
func Retry(q *keys.Queue, id, entry string, attempt int, started, finished int64, reason string, at int64) Transition {
	return Transition{Queue: q, Op: OpRetry, ID: id, Entry: entry, Attempt: attempt, Started: started,
		Finished: finished, Reason: reason, RetryAt: at}
}

// Dead fails the job for good.
func Dead(q *keys.Queue, id, entry string, attempt int, started, finished int64, reason string) Transition {
	return Transition{Queue: q, Op: OpDead, ID: id, Entry: entry, Attempt: attempt, Started: started,
		Finished: finished, Reason: reason}
}

// Poison keeps an entry that could not be read as a dead record under id (its job's id, or
// DeadEntryPrefix and the entry id when it names none).
func Poison(q *keys.Queue, id, entry string, at int64, reason string) Transition {
	return Transition{Queue: q, Op: OpPoison, ID: id, Entry: entry, Started: at, Finished: at, Reason: reason}
}

// WithPayload sends the payload as read from the entry back with the outcome.
func (t Transition) WithPayload(payload string) Transition {
	t.Payload, t.PayloadSent = payload, true
	return t
}

// FinishConfig is what finish.lua needs besides the transitions: the worker's name, its
// retention settings in ms, and how to announce the changes.
type FinishConfig struct {
	Worker       string
	Retention    int64       // default retention of finished records; 0 keeps only a tombstone
	MinRetention int64       // the shortest time any finished record is kept
	Events       events.Mode // None publishes no events
}

// FinishCall is one finish.lua call applying ts, which must all be of one queue.
func FinishCall(cfg FinishConfig, ts []Transition) script.Call {
	q := ts[0].Queue
	ks := make([]string, 0, 5+len(ts))
	ks = append(ks, q.Stream(), q.Scheduled(), q.Dead(), q.Stats(), q.Watching())
	args := make([]any, 0, 7+10*len(ts))
	args = append(args, keys.Group, cfg.Worker, cfg.Retention, q.Wake(), cfg.MinRetention,
		cfg.Events.Command(), q.Events())
	for i := range ts {
		t := &ts[i]
		ks = append(ks, q.Job(t.ID))
		sent, data, extra := "", "", ""
		if t.PayloadSent {
			sent = "1"
		}
		switch t.Op {
		case OpDone:
			data = t.Result
		case OpRetry:
			data, extra = t.Reason, strconv.FormatInt(t.RetryAt, 10)
		case OpDead, OpPoison:
			data = t.Reason
		}
		args = append(args, t.Op.String(), t.ID, t.Entry, strconv.Itoa(t.Attempt), t.Started, t.Finished,
			data, extra, sent, t.Payload)
	}
	return script.Call{Script: finishScript, Keys: ks, Args: args}
}

// FinishReply reads a FinishCall's reply: one code per transition, script.OK (applied),
// script.Refused (the job moved on; for a start mark: ignored) or script.Died (a retry that
// became dead).
func FinishReply(cmd *redis.Cmd, n int) ([]script.Code, error) {
	codes, err := cmd.Int64Slice()
	if err == nil && (len(codes) != n+1 || codes[0] != int64(script.OK)) {
		err = fmt.Errorf("finish: unexpected reply %v", codes)
	}
	if err != nil {
		return nil, err
	}
	out := make([]script.Code, n)
	for i, c := range codes[1:] {
		out[i] = script.Code(c)
	}
	return out, nil
}

// Release puts back the entries a worker that shuts down still holds (release.lua), so another
// worker starts them at once; it returns how many jobs it put back and how many entries it
// dropped (they carried no live job).
func Release(ctx context.Context, rdb redis.Scripter, q keys.Queue, now int64, entries []string) (released, dropped int, err error) {
	args := make([]any, 0, 3+len(entries))
	args = append(args, keys.Group, q.JobPrefix(), now)
	for _, id := range entries {
		args = append(args, id)
	}
	code, rest, err := script.Reply(releaseScript.Run(ctx, rdb, []string{q.Stream(), q.Stats()}, args...))
	if err == nil && (code != script.OK || len(rest) != 2) {
		err = fmt.Errorf("release: unexpected reply %v %v", code, rest)
	}
	if err != nil {
		return 0, 0, err
	}
	r, _ := rest[0].(int64)
	d, _ := rest[1].(int64)
	return int(r), int(d), nil
}

// Cancel cancels job id (cancel.lua), announcing it in mode ev. It answers script.OK,
// script.NotFound, or script.WrongState with the status of a job that already ended.
func Cancel(ctx context.Context, rdb redis.Scripter, q keys.Queue, id string, now, retention, minRetention int64, ev events.Mode) (script.Code, string, error) {
	code, rest, err := script.Reply(cancelScript.Run(ctx, rdb,
		[]string{q.Stream(), q.Scheduled(), q.Stats(), q.Job(id)},
		keys.Group, now, retention, id, minRetention, ev.Command(), q.Events()))
	if err != nil {
		return 0, "", err
	}
	status := ""
	if len(rest) > 0 {
		status, _ = rest[0].(string)
	}
	return code, status, nil
}

// Replay moves dead job id back into the stream (replay.lua). It answers script.OK with the new
// entry, script.NotFound, script.WrongState with the job's status, script.NoType, or
// script.UniqueHeld with the id of the job that holds the unique key.
func Replay(ctx context.Context, rdb redis.Scripter, q keys.Queue, id string, now int64) (script.Code, string, error) {
	code, rest, err := script.Reply(replayScript.Run(ctx, rdb, []string{q.Stream(), q.Dead(), q.Job(id)}, now, id))
	if err != nil {
		return 0, "", err
	}
	data := ""
	if len(rest) > 0 {
		data, _ = rest[0].(string)
	}
	return code, data, nil
}

// Purge deletes up to limit of the oldest dead jobs of q that died at least olderThanMS ago by
// Redis's clock, and returns how many.
func Purge(ctx context.Context, rdb redis.Scripter, q keys.Queue, limit int, olderThanMS int64) (int, error) {
	code, rest, err := script.Reply(purgeScript.Run(ctx, rdb, []string{q.Dead()}, q.JobPrefix(), limit, olderThanMS))
	if err == nil && (code != script.OK || len(rest) != 1) {
		err = fmt.Errorf("purge: unexpected reply %v %v", code, rest)
	}
	if err != nil {
		return 0, err
	}
	n, _ := rest[0].(int64)
	return int(n), nil
}

// Foreign is a stream entry of another Watermill publisher for Adopt to make a job of.
type Foreign struct {
	ID, Entry, Type string
	MaxRetries      int
	TimeoutMS       int64
	CreatedAt       int64 // unix ms: the entry's time
	RunAt           int64 // unix ms: a time after Adopt's now schedules the job
	UniqueKey       string
	UniqueTTL       int64 // ms, with UniqueKey
}

// Adopted is what Adopt did: Code is script.OK (adopted: in progress on its entry, or
// Scheduled), script.Exists (adopted already, on this entry), script.Refused (the id names a
// job that lives on another entry; nothing written) or script.UniqueHeld (Holder holds the
// unique key; the entry was acknowledged and deleted, nothing else written).
type Adopted struct {
	Code      script.Code
	Scheduled bool
	Holder    string
}

// Adopt makes a job of an entry of another Watermill publisher on its first delivery to worker
// (foreign.lua), under the rules of a publish: a unique key is taken or the message refused, a
// due time after now schedules the job.
func Adopt(ctx context.Context, rdb redis.Scripter, q keys.Queue, f Foreign, now int64, worker string) (Adopted, error) {
	ks := []string{q.Stats(), q.Job(f.ID), q.Stream(), q.Scheduled()}
	if f.UniqueKey != "" {
		ks = append(ks, q.Unique(f.UniqueKey))
	}
	code, rest, err := script.Reply(foreignScript.Run(ctx, rdb, ks, f.Entry, f.Type, f.MaxRetries,
		f.TimeoutMS, f.CreatedAt, now, worker, f.ID, keys.Group, f.RunAt, q.Wake(), f.UniqueTTL))
	if err != nil {
		return Adopted{}, err
	}
	a := Adopted{Code: code}
	if len(rest) > 0 {
		s, _ := rest[0].(string)
		if code == script.UniqueHeld {
			a.Holder = s
		} else {
			a.Scheduled = s == "scheduled"
		}
	}
	return a, nil
}
