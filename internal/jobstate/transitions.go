package jobstate

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/status"
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
	OpSnooze               // the handler asked to run later: scheduled, no attempt counted
)

// opNames are finish.lua's names of the ops.
var opNames = [...]string{OpStart: "start", OpDone: "done", OpRetry: "retry", OpDead: "dead", OpPoison: "poison",
	OpSnooze: "snooze"}

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
	Queue   *keys.Queue // shared, not copied: every job makes several transitions
	Op      Op
	ID      string
	Entry   string
	Attempt int
	Result  string // Done
	Reason  string // Retry, Dead, Poison: the error; Done: the process span's traceparent
	// The times, in unix ms as finish.lua takes them: converted once, by the constructor, so a
	// transition stays small (a worker queues one per job) and finishCall converts nothing.
	started, finished, retryAt int64
	// Payload is the job's payload exactly as read from its entry, sent back with an outcome
	// so that finish.lua need not read the entry again (WithPayload).
	Payload     string
	PayloadSent bool
	// Logs are the attempt's log lines as finish.lua stores them (EncodeLogs), empty when its
	// handler logged nothing; Done, Retry, Dead and Snooze carry them (WithLogs).
	Logs string
	// Type is the job's type, for log lines only: it is not sent to Redis.
	Type string
	// Began (when the worker began handling the attempt) and Note (what else its hooks need
	// to know, pipeline's business) are for the worker's metrics; neither is sent to Redis.
	Began time.Time
	Note  uint8
}

// StartParams is a Start: attempt Attempt of job ID, on stream entry Entry, began At.
type StartParams struct {
	ID, Entry string
	Attempt   int
	At        time.Time
}

// Start marks an attempt as running.
func Start(q *keys.Queue, p StartParams) Transition {
	return Transition{Queue: q, Op: OpStart, ID: p.ID, Entry: p.Entry, Attempt: p.Attempt, started: p.At.UnixMilli()}
}

// Ran is the attempt an outcome (Done, Retry, Dead) ends: attempt Attempt of job ID, on stream
// entry Entry, which ran from Started to Finished.
type Ran struct {
	ID, Entry         string
	Attempt           int
	Started, Finished time.Time
}

func (r *Ran) transition(q *keys.Queue, op Op) Transition {
	return Transition{Queue: q, Op: op, ID: r.ID, Entry: r.Entry, Attempt: r.Attempt,
		started: r.Started.UnixMilli(), finished: r.Finished.UnixMilli()}
}

// DoneParams is a Done: the attempt and its handler's result.
type DoneParams struct {
	Ran
	Result string
	// Traceparent is the W3C trace context of the attempt's process span, when it has one. A
	// workflow's task keeps it for the tasks that wait for it. Their process spans link to it
	// (lua/workflows.lua's cv_wf_end and cv_wf_release). Empty when tracing is off.
	Traceparent string
}

// Done completes the job with its result.
func Done(q *keys.Queue, p DoneParams) Transition {
	t := p.transition(q, OpDone)
	t.Result, t.Reason = p.Result, p.Traceparent
	return t
}

// RetryParams is a Retry: the attempt, why it failed, and when the job runs again.
type RetryParams struct {
	Ran
	Reason  string
	RetryAt time.Time
}

// Retry records a failed attempt and schedules the job for RetryAt, or sends it to the dead
// set when the attempt was its last.
func Retry(q *keys.Queue, p RetryParams) Transition {
	t := p.transition(q, OpRetry)
	t.Reason, t.retryAt = p.Reason, p.RetryAt.UnixMilli()
	return t
}

// SnoozeParams is a Snooze: the attempt, when the job runs again, and how many snoozes a job
// may take (Max) before it fails instead.
type SnoozeParams struct {
	Ran
	RunAt time.Time
	Max   int
}

// Snooze schedules the job for RunAt without counting the attempt or recording an error (its
// handler asked to run later), or fails it when it snoozed more than Max times (script.Died).
func Snooze(q *keys.Queue, p SnoozeParams) Transition {
	t := p.transition(q, OpSnooze)
	t.Reason, t.retryAt = strconv.Itoa(p.Max), p.RunAt.UnixMilli()
	return t
}

// DeadParams is a Dead: the attempt and why it failed for good.
type DeadParams struct {
	Ran
	Reason string
}

// Dead fails the job for good.
func Dead(q *keys.Queue, p DeadParams) Transition {
	t := p.transition(q, OpDead)
	t.Reason = p.Reason
	return t
}

// PoisonParams is a Poison: stream entry Entry, which could not be read, found At. It is kept
// as a dead record under ID. ID is its job's id, or DeadEntryPrefix and the entry id when it
// names none.
type PoisonParams struct {
	ID, Entry string
	At        time.Time
	Reason    string
}

// Poison keeps an entry that could not be read as a dead record.
func Poison(q *keys.Queue, p PoisonParams) Transition {
	at := p.At.UnixMilli()
	return Transition{Queue: q, Op: OpPoison, ID: p.ID, Entry: p.Entry, started: at, finished: at, Reason: p.Reason}
}

// WithPayload sends the payload as read from the entry back with the outcome.
func (t Transition) WithPayload(payload string) Transition {
	t.Payload, t.PayloadSent = payload, true
	return t
}

// WithLogs sends the attempt's log lines (EncodeLogs) with its outcome.
func (t Transition) WithLogs(logs string) Transition {
	t.Logs = logs
	return t
}

// Took is how long the attempt an outcome ends ran, from its start to its end, to the
// millisecond the transition keeps; 0 for a start mark. The worker's history counts it.
func (t *Transition) Took() time.Duration {
	if t.finished < t.started {
		return 0
	}
	return time.Duration(t.finished-t.started) * time.Millisecond
}

// FinishConfig is what finish.lua needs besides the transitions: the worker's name, its
// retention settings, and how to announce the changes.
type FinishConfig struct {
	Worker       string
	Retention    time.Duration // default retention of finished records; 0 or less keeps only a tombstone
	MinRetention time.Duration // the shortest time any finished record is kept
	Events       events.Mode   // None publishes no events
	// IndexCap bounds the queue's index of completed jobs (keys.Queue.Completed): 0 is
	// keys.FinishedIndexCap, negative indexes nothing. Tests set a small one.
	IndexCap int
}

// indexCap is the cap a FinishConfig's or CancelParams' IndexCap means.
func indexCap(n int) int {
	switch {
	case n == 0:
		return keys.FinishedIndexCap
	case n < 0:
		return 0
	}
	return n
}

// finishCall is one finish.lua call applying ts, which must all be of one queue.
func finishCall(cfg FinishConfig, ts []Transition) script.Call {
	q := ts[0].Queue
	ks := make([]string, 0, 11+len(ts))
	ks = append(ks, q.Stream(), q.Scheduled(), q.Dead(), q.Stats(), q.Watching())
	// The lines' value goes only in a call that has some (finish.lua's ARGV[9], the values an
	// item): most calls have none, and a value a job costs Redis a string to make and parse.
	stride, strideArg := 10, strides[0]
	for i := range ts {
		if ts[i].Logs != "" {
			stride, strideArg = 11, strides[1]
			break
		}
	}
	args := make([]any, 0, 9+stride*len(ts))
	args = append(args, keys.Group, cfg.Worker, retentionMS(cfg.Retention), q.Wake(),
		cfg.MinRetention.Milliseconds(), cfg.Events.Command(), q.Events(), indexCap(cfg.IndexCap), strideArg)
	for i := range ts {
		t := &ts[i]
		ks = append(ks, q.Job(t.ID))
		data, extra := "", ""
		var sent any = ""
		if t.PayloadSent {
			sent = sentArg
		}
		switch t.Op {
		case OpDone:
			data, extra = t.Result, t.Reason
		case OpRetry, OpSnooze:
			data, extra = t.Reason, strconv.FormatInt(t.retryAt, 10)
		case OpDead, OpPoison:
			data = t.Reason
		}
		args = append(args, t.Op.arg(), t.ID, t.Entry, attemptArg(t.Attempt), t.started, t.finished,
			data, extra, sent, t.Payload)
		if stride == 11 {
			args = append(args, t.Logs)
		}
	}
	ks = append(ks, q.KeyWaiting(), q.Logged(), q.Workflows(), q.Grouped(), q.Completed(), keys.IndexCount(q.Completed()))
	return script.Call{Script: finishScript, Keys: ks, Args: args}
}

// Arguments boxed once: a string made an interface value costs an allocation per job unless
// it is constant or empty. The op, the attempt and the sent flag repeat from job to job.
var (
	sentArg any = "1"
	strides     = [2]any{"10", "11"}
	opArgs      = func() []any {
		out := make([]any, len(opNames))
		for i, n := range opNames {
			out[i] = n
		}
		return out
	}()
	attemptArgs = func() []any {
		out := make([]any, 32)
		for i := range out {
			out[i] = strconv.Itoa(i)
		}
		return out
	}()
)

// arg is o's name as a script argument.
func (o Op) arg() any {
	if int(o) < len(opArgs) && opNames[o] != "" {
		return opArgs[o]
	}
	return o.String()
}

// attemptArg is attempt n as a script argument.
func attemptArg(n int) any {
	if n >= 0 && n < len(attemptArgs) {
		return attemptArgs[n]
	}
	return strconv.Itoa(n)
}

// finishReply reads a finishCall's reply: one code per transition, script.OK (applied),
// script.Refused (the job moved on; for a start mark: ignored) or script.Died (a retry that
// became dead).
func finishReply(cmd *redis.Cmd, n int) ([]script.Code, error) {
	r, err := decode("finish", cmd)
	if err == nil {
		err = r.want(n)
	}
	if err != nil {
		return nil, err
	}
	out := make([]script.Code, n)
	for i := range out {
		out[i] = script.Code(r.int(i))
	}
	return out, nil
}

// retentionMS is a duration in the scripts' milliseconds, for retentions and timeouts alike.
// Zero or less is 0: a retention of 0 keeps only a tombstone, and a timeout of 0 is none.
// Anything positive is at least 1, so a microsecond is not taken for none.
func retentionMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(1, d.Milliseconds())
}

// ReleaseParams is a Release: the entries to put back, stamped Now.
type ReleaseParams struct {
	Now     time.Time
	Entries []string
}

// Release puts back the entries a worker that shuts down still holds (release.lua), so another
// worker starts them at once.
func (s *Store) Release(ctx context.Context, q keys.Queue, p ReleaseParams) (Released, error) {
	now, entries := p.Now, p.Entries
	args := make([]any, 0, 3+len(entries))
	args = append(args, keys.Group, q.JobPrefix(), now.UnixMilli())
	for _, id := range entries {
		args = append(args, id)
	}
	r, err := decode("release", releaseScript.Run(ctx, s.rdb, []string{q.Stream(), q.Stats()}, args...))
	if err == nil {
		err = r.want(2)
	}
	if err != nil {
		return Released{}, err
	}
	return Released{Jobs: int(r.int(0)), Dropped: int(r.int(1))}, nil
}

// Released is what Release did: how many jobs it put back, and how many entries it dropped
// (they carried no live job).
type Released struct {
	Jobs, Dropped int
}

// CancelParams is a Cancel of job ID at Now. The record is kept for its own retention or
// Retention, and never less than MinRetention. (A retention of 0 or less keeps only a
// tombstone.) The change is announced in mode Events. Delete deletes the job instead. It
// deletes only a scheduled or queued one, and its record goes at once (no tombstone, no
// retention).
type CancelParams struct {
	ID                      string
	Now                     time.Time
	Retention, MinRetention time.Duration
	Events                  events.Mode
	Delete                  bool
	// IndexCap bounds the queue's index of canceled jobs (keys.Queue.Canceled), as
	// FinishConfig.IndexCap.
	IndexCap int
}

// Cancel cancels a job (cancel.lua). Its Row is script.OK (its Data the items of the queue's
// workflow cascades left to follow, "0" when none: FollowCascade), script.NotFound, or
// script.WrongState with the status of a job that already ended (with Delete: of a job that is
// not scheduled or queued).
func (s *Store) Cancel(ctx context.Context, q keys.Queue, p CancelParams) (Row, error) {
	op, del := "cancel", ""
	if p.Delete {
		op, del = "delete", "1"
	}
	return decodeRow(op, cancelScript.Run(ctx, s.rdb,
		[]string{q.Stream(), q.Scheduled(), q.Stats(), q.Job(p.ID), q.Canceled(), keys.IndexCount(q.Canceled())},
		keys.Group, p.Now.UnixMilli(), retentionMS(p.Retention), p.ID, p.MinRetention.Milliseconds(),
		p.Events.Command(), q.Events(), indexCap(p.IndexCap), del))
}

// RunNowParams is a RunNow: the job, and the events mode to announce it in.
type RunNowParams struct {
	ID     string
	Events events.Mode
}

// RunNow moves scheduled job p.ID of q into its stream now (run_now.lua), announcing it in mode
// p.Events. Its Row is script.OK, script.NotFound, or script.WrongState with the job's status
// ("limited" for a scheduled job waiting for a concurrency slot, which only a freed slot
// moves).
func (s *Store) RunNow(ctx context.Context, q keys.Queue, p RunNowParams) (Row, error) {
	return decodeRow("run now", runNowScript.Run(ctx, s.rdb,
		[]string{q.Scheduled(), q.Stream(), q.Job(p.ID)}, p.ID, q.JobPrefix(), p.Events.Command(), q.Events()))
}

// Replay moves dead job id back into the stream at now (replay.lua). Its Row is script.OK with
// the new entry, script.NotFound, script.WrongState with the job's status, script.NoType, or
// script.UniqueHeld with the id of the job that holds the unique key.
func (s *Store) Replay(ctx context.Context, q keys.Queue, id string, now time.Time) (Row, error) {
	c := replayCall(q, id, now)
	return replayReply(c.Script.Run(ctx, s.rdb, c.Keys, c.Args...))
}

// replayCall is Replay as a call for script.Pipelined; read its reply with replayReply.
func replayCall(q keys.Queue, id string, now time.Time) script.Call {
	return script.Call{Script: replayScript, Keys: []string{q.Stream(), q.Dead(), q.Job(id)},
		Args: []any{now.UnixMilli(), id}}
}

// replayReply reads a replayCall's reply as Replay answers.
func replayReply(cmd *redis.Cmd) (Row, error) { return decodeRow("replay", cmd) }

// PurgeParams is a Purge: up to Limit of the oldest dead jobs that died at least OlderThan ago
// by Redis's clock.
type PurgeParams struct {
	Limit     int
	OlderThan time.Duration
}

// Purge deletes dead jobs of q (purge.lua) and returns how many; callers loop until it is below
// the limit.
func (s *Store) Purge(ctx context.Context, q keys.Queue, p PurgeParams) (int, error) {
	r, err := decode("purge", purgeScript.Run(ctx, s.rdb, []string{q.Dead()}, q.JobPrefix(), p.Limit,
		p.OlderThan.Milliseconds()))
	if err == nil {
		err = r.want(1)
	}
	if err != nil {
		return 0, err
	}
	return int(r.int(0)), nil
}

// PurgeDryRunParams is a PurgeDryRun: the Purge it previews, and how many of the ids it would
// delete to skip (Offset), for paging.
type PurgeDryRunParams struct {
	PurgeParams
	Offset int
}

// PurgeDryRun returns up to p.Limit of the ids Purge would delete now, oldest first. Those
// are the dead jobs of q that died at least p.OlderThan ago by Redis's clock. It skips the
// first p.Offset of them, and deletes nothing. It runs purge.lua itself, so the preview and the purge share one age
// rule. Callers page with Offset until fewer than Limit come back.
func (s *Store) PurgeDryRun(ctx context.Context, q keys.Queue, p PurgeDryRunParams) ([]string, error) {
	r, err := decode("purge", purgeScript.Run(ctx, s.rdb, []string{q.Dead()}, q.JobPrefix(), p.Limit,
		p.OlderThan.Milliseconds(), p.Offset))
	if err == nil {
		err = r.want(2)
	}
	var raw []any
	if err == nil {
		raw, _ = r.rest[1].([]any)
		if len(raw) == 0 && r.int(0) != 0 {
			err = r.unexpected()
		}
	}
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(raw))
	for k, v := range raw {
		ids[k], _ = v.(string)
	}
	return ids, nil
}

// Foreign is a stream entry of another Watermill publisher for Adopt to make a job of.
type Foreign struct {
	ID, Entry, Type string
	MaxRetries      int
	Timeout         time.Duration
	CreatedAt       time.Time // the entry's time
	RunAt           time.Time // after Adopt's now schedules the job; zero: at once
	UniqueKey       string
	UniqueTTL       time.Duration // with UniqueKey
}

// Adopted is what Adopt did. Code is script.OK when the job was adopted: in progress on its
// entry, or Scheduled. It is script.Exists when it was adopted already, on this entry. It is
// script.Refused when the id names a job that lives on another entry; nothing is written. It
// is script.UniqueHeld when Holder holds the unique key. Then the entry was acknowledged and
// deleted, and nothing else written.
type Adopted struct {
	Code      script.Code
	Scheduled bool
	Holder    string
}

// AdoptParams is an Adopt: the entry's job, the time, and the worker it is delivered to.
type AdoptParams struct {
	Job    Foreign
	Now    time.Time
	Worker string
}

// Adopt makes a job of an entry of another Watermill publisher on its first delivery to
// p.Worker (foreign.lua). The rules of a publish apply. A unique key is taken, or the message
// refused. A due time after p.Now schedules the job.
func (s *Store) Adopt(ctx context.Context, q keys.Queue, p AdoptParams) (Adopted, error) {
	f, now, worker := p.Job, p.Now, p.Worker
	ks := []string{q.Stats(), q.Job(f.ID), q.Stream(), q.Scheduled()}
	if f.UniqueKey != "" {
		ks = append(ks, q.Unique(f.UniqueKey))
	}
	var runAt, uttl int64
	if !f.RunAt.IsZero() {
		runAt = f.RunAt.UnixMilli()
	}
	if f.UniqueKey != "" {
		uttl = max(1, f.UniqueTTL.Milliseconds())
	}
	row, err := decodeRow("adopt", foreignScript.Run(ctx, s.rdb, ks, f.Entry, f.Type, f.MaxRetries,
		retentionMS(f.Timeout), f.CreatedAt.UnixMilli(), now.UnixMilli(), worker, f.ID, keys.Group, runAt, q.Wake(), uttl))
	if err != nil {
		return Adopted{}, err
	}
	a := Adopted{Code: row.Code}
	if row.Code == script.UniqueHeld {
		a.Holder = row.Data
	} else {
		a.Scheduled = status.Status(row.Data) == status.Scheduled
	}
	return a, nil
}
