package jobstate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/keys"
)

// The changes of a queue's settings that live beside its jobs: the partition count, the limits
// and the group settings. The job scripts read those keys atomically with a job's move, so
// they stay out of the settings record (settings.go); each change raises the record's rev.
// The rules here are the state's own. One change of a layout runs at a time, under its lock. A
// layout that holds jobs does not change. A partitioned queue holds no limits. The bounds on
// limits and weights are exact under the lock. pipeline.Inspector checks its callers' input
// and maps these errors to its own.

// Errors of the queue changes, which pipeline maps to its own (ErrQueueBusy, ErrInvalid).
var (
	// ErrBusy: the queue's layout is locked by another change, or holds what a change of its
	// partition count would lose.
	ErrBusy = errors.New("queue busy")
	// ErrRefused: the change breaks a rule of the queue's state (a bound, limits on a
	// partitioned queue).
	ErrRefused = errors.New("change refused")
)

const (
	// layoutLockTTL bounds how long a crashed change keeps others out.
	layoutLockTTL = 30 * time.Second
	// layoutWait bounds how long HoldLayout waits for a change of the partition count to end.
	// A change waits at most its Drain, which publishers wait out too, and so is kept below 5 s.
	layoutWait = 6 * time.Second
	// ClosedTTL is how long a layout that a change left stays closed: far beyond any producer's
	// cached count and any publish in flight.
	ClosedTTL = time.Hour
)

// LockLayout takes the lock that lets one change of queue's partition count, limits or group
// settings run at a time, or refuses with ErrBusy. Two interleaved would open a layout the
// other just closed, or leave a setting behind in the old layout.
func (s *Store) LockLayout(ctx context.Context, queue string) (unlock func(), err error) {
	token := strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.FormatUint(rand.Uint64(), 36)
	ok, err := LockLayout(ctx, s.rdb, s.prefix, queue, token, layoutLockTTL)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: another change of its partition count, limits or group settings is running", ErrBusy)
	}
	return func() { UnlockLayout(context.WithoutCancel(ctx), s.rdb, s.prefix, queue, token) }, nil
}

// HoldLayout is LockLayout waiting for the lock, up to layoutWait: a change of the limits or
// group settings holds it for a few round trips.
func (s *Store) HoldLayout(ctx context.Context, queue string) (unlock func(), err error) {
	deadline := time.Now().Add(layoutWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		unlock, err := s.LockLayout(ctx, queue)
		if err == nil || !errors.Is(err, ErrBusy) || time.Now().Add(wait).After(deadline) {
			return unlock, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// PartitionKeys returns the keys of every partition of queue, in partition order.
func PartitionKeys(prefix, queue string, p int) []keys.Queue {
	qs := make([]keys.Queue, max(1, p))
	for i := range qs {
		qs[i] = keys.New(prefix, keys.PartitionName(queue, i, p))
	}
	return qs
}

// LayoutChange is a change of a queue's partition count from From to To (Store.SetPartitions).
type LayoutChange struct {
	Queue    string
	From, To int
	// Drain is how long to wait for the old layout to empty before refusing.
	Drain time.Duration
}

// SetPartitions changes queue's partition count, under its layout lock, which the caller
// holds. The same count opens its layout, which repairs a change that stopped half-way.
//
// A change is refused (ErrRefused) while the queue has limits. Otherwise the old layout is
// closed (keys.Queue.Closed): a publish that reaches it from then on is refused and sent
// again. So the check that follows sees every job the old layout will ever hold. It waits up
// to c.Drain for the layout to empty, else opens it again and refuses (ErrBusy). Then the
// counters and the group settings move to the new layout, which opens, and the count is
// written.
func (s *Store) SetPartitions(ctx context.Context, c LayoutChange) error {
	if c.From == c.To {
		return SetClosed(ctx, s.rdb, PartitionKeys(s.prefix, c.Queue, c.To), false, ClosedTTL)
	}
	if err := s.limitsAllowPartitions(ctx, c.Queue, c.From, c.To); err != nil {
		return err
	}
	old := PartitionKeys(s.prefix, c.Queue, c.From)
	if err := SetClosed(ctx, s.rdb, old, true, ClosedTTL); err != nil {
		return fmt.Errorf("close the old partitions: %w", err)
	}
	reopen := func(err error) error {
		if rerr := SetClosed(context.WithoutCancel(ctx), s.rdb, old, false, ClosedTTL); rerr != nil {
			return errors.Join(err, fmt.Errorf("open the old partitions again (queues create with the old count does): %w", rerr))
		}
		return err
	}
	deadline := time.Now().Add(c.Drain)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := s.layoutEmpty(ctx, old, c.To)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrBusy) || time.Now().Add(wait).After(deadline) {
			return reopen(err)
		}
		select {
		case <-ctx.Done():
			return reopen(ctx.Err())
		case <-time.After(wait):
		}
	}
	next := PartitionKeys(s.prefix, c.Queue, c.To)
	if err := MoveCounters(ctx, s.rdb, old, next[0]); err != nil {
		return reopen(err)
	}
	// Every partition holds the same group settings; each partition's scripts read only their
	// own, so the new layout gets them all before it opens.
	if err := CopyGroupSettings(ctx, s.rdb, old[0], next); err != nil {
		return reopen(err)
	}
	if err := SetClosed(ctx, s.rdb, next, false, ClosedTTL); err != nil {
		return reopen(fmt.Errorf("open the new partitions: %w", err))
	}
	if err := WritePartitions(ctx, s.rdb, s.prefix, c.Queue, c.To); err != nil {
		return reopen(fmt.Errorf("write the count: %w", err))
	}
	// Workers read the counts on their fallback poll anyway: a lost notice only delays them.
	_ = s.BumpSettings(ctx, c.Queue)
	// A copy left behind by a failure here is harmless: no script reads the old layout, and a
	// change back to it replaces its settings first.
	_ = DeleteGroupSettings(ctx, s.rdb, old)
	return nil
}

// layoutEmpty says whether the partitions old hold nothing a job left, and if they do,
// returns an error wrapping ErrBusy that says how much of what.
func (s *Store) layoutEmpty(ctx context.Context, old []keys.Queue, p int) error {
	st, err := s.ReadStats(ctx, old)
	if err != nil {
		return err
	}
	var sum Stats
	for _, x := range st {
		sum.Scheduled += x.Scheduled
		sum.Queued += x.Queued
		sum.InProgress += x.InProgress
		sum.Dead += x.Dead
	}
	records := 0
	for _, q := range old {
		n, err := s.ScanKeys(ctx, q.JobPrefix(), false, false)
		if err != nil {
			return fmt.Errorf("count the job records: %w", err)
		}
		records += n
	}
	// Every job has a record; those that are not live or dead are finished ones.
	live := sum.Scheduled + sum.Queued + sum.InProgress + sum.Dead
	finished := max(0, int64(records)-live)
	if live+finished > 0 {
		return fmt.Errorf("%w: cannot change its partitions from %d to %d while its %d partition(s) hold %d scheduled, %d queued, %d in-progress and %d dead jobs and %d finished records (completed or canceled, or their tombstones), which the new layout would not see: let the live jobs run, replay or purge the dead ones, and wait for the finished records' retention to end, or delete the queue first",
			ErrBusy, len(old), p, len(old), sum.Scheduled, sum.Queued, sum.InProgress, sum.Dead, finished)
	}
	return nil
}

// limitsAllowPartitions refuses a change of queue's partition count to p > 1 while it has
// limits, naming them. The change would leave them listed, in the plain queue's keys, but read
// by no partition's admission.
func (s *Store) limitsAllowPartitions(ctx context.Context, queue string, cur, p int) error {
	if p <= 1 {
		return nil
	}
	ls, err := ReadLimits(ctx, s.rdb, keys.New(s.prefix, queue))
	if err != nil || len(ls) == 0 {
		return err
	}
	scopes := make([]string, len(ls))
	for k, l := range ls {
		scopes[k] = LimitScopeText(l.Type, l.PerKey)
	}
	plural := "s"
	if len(ls) == 1 {
		plural = ""
	}
	return fmt.Errorf("%w: queue %q has %d limit%s (%s): limits are not supported on a partitioned queue, so its "+
		"partitions cannot change from %d to %d while they exist: delete them first (Inspector.DeleteLimit, "+
		"conveyor limits delete), then set them again on one partition if they are still wanted",
		ErrRefused, queue, len(ls), plural, strings.Join(scopes, "; "), cur, p)
}

// LimitScopeText names a limit's scope as the CLI does.
func LimitScopeText(typ string, perKey bool) string {
	out := "every job"
	if typ != "" {
		out = "type " + typ
	}
	if perKey {
		out += ", per limit key"
	}
	return out
}

// PutLimitParams is a limit to store (Store.PutLimit).
type PutLimitParams struct {
	Queue string
	Limit Limit
	// Max bounds the queue's limits: a new scope past it is refused.
	Max int
	Now time.Time
}

// PutLimit stores p.Limit as the queue's limit of its scope, under the layout lock, which the
// caller holds, and announces it. A new scope is refused (ErrRefused) while the queue has
// p.Max limits: exact under the lock, which every change of the queue's limits holds.
func (s *Store) PutLimit(ctx context.Context, p PutLimitParams) error {
	q := keys.New(s.prefix, p.Queue)
	n, has, err := CountLimits(ctx, s.rdb, q, p.Limit.Type, p.Limit.PerKey)
	if err != nil {
		return err
	}
	if !has && n >= p.Max {
		return fmt.Errorf("%w: queue %q has %d limits, the most a queue may have (MaxQueueLimits): delete one before "+
			"adding a limit for %s, or set one on the whole queue or a scope that has one", ErrRefused, p.Queue, n,
			LimitScopeText(p.Limit.Type, p.Limit.PerKey))
	}
	if err := SetLimit(ctx, s.rdb, q, p.Limit, p.Now); err != nil {
		return err
	}
	return s.announce(ctx, p.Queue)
}

// DropLimit removes the queue's limit of the scope (typ, perKey), announces it, and reports
// whether there was one.
func (s *Store) DropLimit(ctx context.Context, queue, typ string, perKey bool, now time.Time) (bool, error) {
	had, err := DeleteLimit(ctx, s.rdb, keys.New(s.prefix, queue), typ, perKey, now)
	if err != nil || !had {
		return had, err
	}
	return had, s.announce(ctx, queue)
}

// PutGroupsParams is a change of a queue's group settings (Store.PutGroups).
type PutGroupsParams struct {
	Queue  string
	Change GroupChange
	// MaxWeights bounds the groups that have a weight set.
	MaxWeights int
}

// PutGroups writes the change to every partition of the queue, under the layout lock, which
// the caller holds, and announces it. Weights that would leave more than p.MaxWeights groups
// weighted are refused (ErrRefused); the first partition tells, as every one holds the same.
func (s *Store) PutGroups(ctx context.Context, p PutGroupsParams) error {
	n, err := PartitionCount(ctx, s.rdb, s.prefix, p.Queue)
	if err != nil {
		return err
	}
	qs := PartitionKeys(s.prefix, p.Queue, n)
	if err := s.weightsRoom(ctx, p, qs[0]); err != nil {
		return err
	}
	if err := SetGroupSettings(ctx, s.rdb, qs, p.Change); err != nil {
		return err
	}
	return s.announce(ctx, p.Queue)
}

// announce raises queue's settings revision after a change kept outside the record, which
// tells the workers at once; a failure leaves them to their fallback poll.
func (s *Store) announce(ctx context.Context, queue string) error {
	if err := s.BumpSettings(ctx, queue); err != nil {
		return fmt.Errorf("announce the change of queue %s's settings (workers find it within 5s): %w", queue, err)
	}
	return nil
}

// weightsRoom refuses a change that would weight more than p.MaxWeights groups (PutGroups).
func (s *Store) weightsRoom(ctx context.Context, p PutGroupsParams, q keys.Queue) error {
	if len(p.Change.Weights) == 0 {
		return nil
	}
	groups := slices.Collect(maps.Keys(p.Change.Weights))
	n, has, err := CountGroupWeights(ctx, s.rdb, q, groups)
	if err != nil {
		return err
	}
	after := n
	for k, g := range groups {
		switch {
		case p.Change.Weights[g] > 0 && !has[k]:
			after++
		case p.Change.Weights[g] == 0 && has[k]:
			after--
		}
	}
	if after > p.MaxWeights && after > n {
		return fmt.Errorf("%w: queue %q may have at most %d groups with a weight (MaxGroupWeights); it has %d, and the change "+
			"would make it %d: set weights back to 1 (weight 0) first", ErrRefused, p.Queue, p.MaxWeights, n, after)
	}
	return nil
}

// QueueState is what Store.ReadQueueState reads of a queue's settings, wherever each is kept.
type QueueState struct {
	Settings   Settings
	Partitions int
	Limits     []Limit
	// Groups are the group settings, which every partition holds alike.
	Groups GroupSettings
	// Levels are the priority levels above 1 of any partition, sorted.
	Levels []int
}

// ReadQueueState reads queue's settings record, partition count, limits, group settings and
// levels.
func (s *Store) ReadQueueState(ctx context.Context, queue string) (QueueState, error) {
	var out QueueState
	sts, err := s.ReadSettings(ctx, []string{queue})
	if err != nil {
		return out, err
	}
	out.Settings = sts[0]
	if out.Partitions, err = PartitionCount(ctx, s.rdb, s.prefix, queue); err != nil {
		return out, err
	}
	if out.Limits, err = ReadLimits(ctx, s.rdb, keys.New(s.prefix, queue)); err != nil {
		return out, err
	}
	qs := PartitionKeys(s.prefix, queue, out.Partitions)
	if out.Groups, err = ReadGroupSettings(ctx, s.rdb, qs[0]); err != nil {
		return out, err
	}
	levels, err := QueueLevels(ctx, s.rdb, qs)
	if err != nil {
		return out, err
	}
	seen := map[int]bool{}
	for _, ls := range levels {
		for _, l := range ls {
			seen[l] = true
		}
	}
	out.Levels = append([]int{}, slices.Sorted(maps.Keys(seen))...) // [] in JSON, not null
	return out, nil
}
