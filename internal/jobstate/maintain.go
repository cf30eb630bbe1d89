package jobstate

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/status"
)

// The transitions that run outside a worker's hands, for the services that run them. Package
// delayed's Scheduler promotes due jobs. Package recovery's Recoverer recovers lost attempts,
// prunes stopped consumers and reads Redis's clock.

var (
	//go:embed promote.lua
	promoteSrc string
	//go:embed recover.lua
	recoverSrc string
	//go:embed prune.lua
	pruneSrc string
	//go:embed clock.lua
	clockSrc string

	promoteScript = newScript(promoteSrc)
	recoverScript = newScript(recoverSrc)
	pruneScript   = newScript(pruneSrc)
	clockScript   = newScript(clockSrc)
)

// PromoteParams is a Promote: move at most Limit due jobs, announcing them in Events mode.
type PromoteParams struct {
	Limit  int
	Events events.Mode
}

// Promoted is what a Promote did, by Redis's clock.
type Promoted struct {
	Moved int       // jobs moved into the stream
	Next  time.Time // when the next job waiting is due; zero when none waits
	Now   time.Time // Redis's clock when it looked, to the microsecond
	// Lag is how long the most overdue job moved waited past its due time; negative when
	// nothing was due.
	Lag time.Duration
}

// Promote moves up to p.Limit jobs of q that are due by Redis's clock from its scheduled set
// into its stream (promote.lua), announcing them in mode p.Events.
func (s *Store) Promote(ctx context.Context, q keys.Queue, pp PromoteParams) (Promoted, error) {
	r, err := decode("promote", promoteScript.Run(ctx, s.rdb, []string{q.Scheduled(), q.Stream()},
		pp.Limit, q.JobPrefix(), pp.Events.Command(), q.Events()))
	if err == nil {
		err = r.want(4)
	}
	if err != nil {
		return Promoted{}, err
	}
	p := Promoted{Moved: int(r.int(0)), Now: time.UnixMicro(r.int(2)), Lag: time.Duration(r.int(3)) * time.Millisecond}
	if next := r.int(1); next >= 0 {
		p.Next = time.UnixMilli(next)
	}
	return p, nil
}

// RecoverParams is a Recover of stream entries Entries of q. Token is the fence: the caller's
// token of the queue's recovery lock, or empty to skip the fence. The params also carry the
// visibility timeout an entry must still be idle for, Redis-side. They carry the time the
// changes are stamped with, and the events mode.
type RecoverParams struct {
	Token             string
	VisibilityTimeout time.Duration
	Now               time.Time
	Events            events.Mode
	Entries           []string
}

// Recovered is what a Recover did with the entries it was given.
type Recovered struct {
	Requeued int // jobs put back into the stream (and foreign entries added again)
	Dead     int // jobs out of retries, sent to the dead set
	Dropped  int // entries that carried no live job, acknowledged and deleted
	Skipped  int // entries no longer pending or idle long enough: left alone
	Poison   int // unreadable entries, kept as dead records
	// Traced are the jobs put back or sent to the dead set whose metadata carries a W3C trace
	// context (keys.EntryTraceparent), for the recoverer's spans.
	Traced []RecoveredJob
}

// RecoveredJob is a job a Recover put back (Status queued) or sent to the dead set (failed),
// with the W3C trace context its metadata carries.
type RecoveredJob struct {
	ID          string
	Status      status.Status
	Traceparent string
	Tracestate  string
}

// Recover puts back the jobs of pending entries whose worker stopped renewing its lease
// (recover.lua). It returns ErrLockLost when the lock no longer holds p.Token.
func (s *Store) Recover(ctx context.Context, q keys.Queue, p RecoverParams) (Recovered, error) {
	args := make([]any, 0, 7+len(p.Entries))
	args = append(args, keys.Group, p.Token, p.VisibilityTimeout.Milliseconds(), q.JobPrefix(),
		p.Now.UnixMilli(), p.Events.Command(), q.Events())
	for _, id := range p.Entries {
		args = append(args, id)
	}
	r, err := decode("recover", recoverScript.Run(ctx, s.rdb,
		[]string{q.Stream(), q.Dead(), q.Stats(), q.RecoveryLock()}, args...))
	if err == nil && r.code == script.LockLost {
		return Recovered{}, ErrLockLost
	}
	if err == nil {
		err = r.want(6)
	}
	if err != nil {
		return Recovered{}, err
	}
	out := Recovered{Requeued: int(r.int(0)), Dead: int(r.int(1)), Dropped: int(r.int(2)),
		Skipped: int(r.int(3)), Poison: int(r.int(4))}
	if traced, _ := r.rest[5].([]any); len(traced) >= 4 {
		out.Traced = make([]RecoveredJob, 0, len(traced)/4)
		for i := 0; i+3 < len(traced); i += 4 {
			s := func(k int) string { v, _ := traced[i+k].(string); return v }
			out.Traced = append(out.Traced, RecoveredJob{ID: s(0), Status: status.Status(s(1)), Traceparent: s(2), Tracestate: s(3)})
		}
	}
	return out, nil
}

// PruneParams is a Prune: the fence (Token, as in RecoverParams) and how long a consumer must
// have been idle, with nothing pending, to be deleted.
type PruneParams struct {
	Token   string
	MinIdle time.Duration
}

// Prune deletes the consumers of q's group that hold nothing and stopped (prune.lua) and
// returns how many. It returns ErrLockLost when the lock no longer holds p.Token; the error of
// a queue with no stream or group is Redis's own (NOGROUP, no such key).
func (s *Store) Prune(ctx context.Context, q keys.Queue, p PruneParams) (int, error) {
	r, err := decode("prune", pruneScript.Run(ctx, s.rdb, []string{q.Stream(), q.RecoveryLock()},
		keys.Group, p.MinIdle.Milliseconds(), p.Token))
	if err == nil && r.code == script.LockLost {
		return 0, ErrLockLost
	}
	if err == nil {
		err = r.want(1)
	}
	if err != nil {
		return 0, err
	}
	return int(r.int(0)), nil
}

// Clock reads Redis's clock on the node that holds q (clock.lua), to the microsecond.
func (s *Store) Clock(ctx context.Context, q keys.Queue) (time.Time, error) {
	r, err := decode("clock", clockScript.Run(ctx, s.rdb, []string{q.Stream()}))
	if err == nil {
		err = r.want(2)
	}
	if err != nil {
		return time.Time{}, err
	}
	sec, err := strconv.ParseInt(r.str(0), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("clock: %w", err)
	}
	usec, err := strconv.ParseInt(r.str(1), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("clock: %w", err)
	}
	return time.Unix(sec, usec*1000), nil
}
