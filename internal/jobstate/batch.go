package jobstate

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// Batch is several script calls sent in one round trip. Each adding method answers a Pending
// whose Result reads that call's reply once Exec (or ExecLoaded) has run. Callers never see a
// script.Call or a raw reply: a batch is how they group calls, not how they build them.
type Batch struct {
	s     *Store
	calls []script.Call
	cmds  []*redis.Cmd
}

// Pending is one call of a Batch: its answer, readable after the batch ran.
type Pending[T any] struct {
	b    *Batch
	i    int
	read func(*redis.Cmd) (T, error)
}

// Result is the call's answer. Before the batch ran it is the zero T and ErrNotRun.
func (p *Pending[T]) Result() (T, error) {
	if p.b.cmds == nil {
		var zero T
		return zero, ErrNotRun
	}
	return p.read(p.b.cmds[p.i])
}

// ErrNotRun is what a Pending answers before its Batch ran.
var ErrNotRun = errors.New("jobstate: the batch has not run")

// Batch starts an empty batch on the store's writer.
func (s *Store) Batch() *Batch { return &Batch{s: s} }

// Len is the number of calls in the batch.
func (b *Batch) Len() int { return len(b.calls) }

func add[T any](b *Batch, c script.Call, read func(*redis.Cmd) (T, error)) *Pending[T] {
	b.calls = append(b.calls, c)
	return &Pending[T]{b: b, i: len(b.calls) - 1, read: read}
}

// Exec runs the calls: a single one as a plain EVALSHA (falling back to EVAL by itself),
// several pipelined. The error is the first call's, or the pipeline's.
func (b *Batch) Exec(ctx context.Context) error {
	var err error
	b.cmds, err = runCalls(ctx, b.s.rdb, b.calls)
	return err
}

// ExecLoaded runs the calls in one pipeline of EVALSHAs, even a single one, as the worker's
// hot path does: the scripts must be loaded first (WorkerScripts). The error is the first
// call's, or the pipeline's.
func (b *Batch) ExecLoaded(ctx context.Context) error {
	var err error
	b.cmds, err = script.Pipelined(ctx, b.s.rdb, b.calls)
	return err
}

// Enqueue adds one enqueue.lua call creating jobs in q (see Store.Enqueue).
func (b *Batch) Enqueue(q keys.Queue, now time.Time, jobs []NewJob) *Pending[[]Created] {
	return b.EnqueueBounded(q, now, jobs, nil)
}

// EnqueueBounded is Enqueue under bound, the queue's bound on its waiting jobs (nil: none).
// A job the bound refuses answers script.Full.
func (b *Batch) EnqueueBounded(q keys.Queue, now time.Time, jobs []NewJob, bound *Bound) *Pending[[]Created] {
	n := len(jobs)
	return add(b, enqueueCall(q, now, jobs, bound), func(cmd *redis.Cmd) ([]Created, error) { return enqueueReply(cmd, n) })
}

// Debounce adds one debounce.lua call publishing j under its debounce key.
func (b *Batch) Debounce(q keys.Queue, j *NewJob) *Pending[Debounced] {
	return add(b, debounceCall(q, j), debounceReply)
}

// Finish adds one finish.lua call applying ts, which must all be of one queue. It answers one
// code per transition. The code is script.OK (applied), or script.Refused (the job moved on;
// for a start mark: ignored). Or it is script.Died (a retry that became dead).
func (b *Batch) Finish(cfg FinishConfig, ts []Transition) *Pending[[]script.Code] {
	n := len(ts)
	return add(b, finishCall(cfg, ts), func(cmd *redis.Cmd) ([]script.Code, error) { return finishReply(cmd, n) })
}

// Got is a job's record as Get reads it: a flat field/value list; Found is false when there
// is no such job.
type Got struct {
	Flat  []string
	Found bool
}

// Get adds one get.lua call (see Store.Get).
func (b *Batch) Get(q keys.Queue, id string) *Pending[Got] {
	return add(b, getCall(q, id), func(cmd *redis.Cmd) (Got, error) {
		flat, found, err := getReply(cmd)
		return Got{Flat: flat, Found: found}, err
	})
}

// Replay adds one replay.lua call (see Store.Replay).
func (b *Batch) Replay(q keys.Queue, id string, now time.Time) *Pending[Row] {
	return add(b, replayCall(q, id, now), replayReply)
}

// PurgeIDs adds one purge_ids.lua call deleting the dead jobs ids of q: per id script.OK
// (deleted), script.WrongState with the status of a job that is not dead (left alone) or
// script.NotFound.
func (b *Batch) PurgeIDs(q keys.Queue, ids []string) *Pending[[]Row] {
	n := len(ids)
	return add(b, purgeIDsCall(q, ids), func(cmd *redis.Cmd) ([]Row, error) { return purgeIDsReply(cmd, n) })
}

// FinishParams is a worker's batch of outcomes for Store.Finish.
type FinishParams struct {
	Config FinishConfig
	// Chunks are the transitions, one finish.lua call per chunk; a chunk's are of one queue.
	Chunks [][]Transition
	// Via is the client to write through (pipeline's replica writer); nil: the store's own.
	Via redis.UniversalClient
}

// Finished is one chunk's answer: a code per transition (see Batch.Finish), or the error.
type Finished struct {
	Codes []script.Code
	Err   error
}

// Finish applies p's chunks in one pipeline of EVALSHAs (WorkerScripts must be loaded) and
// answers per chunk, in order: one chunk failing leaves the others' answers.
func (s *Store) Finish(ctx context.Context, p FinishParams) []Finished {
	st := s
	if p.Via != nil {
		st = s.via(p.Via)
	}
	b := st.Batch()
	pend := make([]*Pending[[]script.Code], len(p.Chunks))
	for i, ts := range p.Chunks {
		pend[i] = b.Finish(p.Config, ts)
	}
	_ = b.ExecLoaded(ctx) // each call carries its own error
	out := make([]Finished, len(pend))
	for i, f := range pend {
		out[i].Codes, out[i].Err = f.Result()
	}
	return out
}
