package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// MaxPartitions bounds QueueOptions.Partitions.
const MaxPartitions = keys.MaxPartitions

// partitionsTTL is how long a Client trusts the partition count it read for a queue before it
// reads it again. So a count changed with CreateQueue in another process reaches every reader
// within this time. A publish does not depend on it. One to a layout that a change left is
// refused by its closed flag, and sent again with the count read again (Client.publish).
const partitionsTTL = 5 * time.Second

// layoutChanges counts the partition counts that CreateQueue and DeleteQueue changed in this
// process. A Client's cached count read before the latest change is stale at once. So a
// process that changes a count reads its own change on its next call.
var layoutChanges atomic.Int64

// closedTTL is how long a layout that a change left stays closed: far beyond any producer's
// cached count (partitionsTTL) and any publish in flight.
const closedTTL = time.Hour

// setClosed sets (closed) or clears the closed flag of every partition of qs, in one pipeline.
func setClosed(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue, closed bool) error {
	return jobstate.SetClosed(ctx, rdb, qs, closed, closedTTL)
}

// partitionCount reads how many partitions queue has (1 when none was set).
func partitionCount(ctx context.Context, rdb redis.Cmdable, prefix, queue string) (int, error) {
	return jobstate.PartitionCount(ctx, rdb, prefix, queue)
}

// knownQueues reads the known queue names, sorted, and the partition counts of those that have
// more than one, in one round trip (jobstate.Store.KnownQueues).
func knownQueues(ctx context.Context, js jobstate.Backend) ([]string, map[string]int, error) {
	return js.KnownQueues(ctx)
}

// errLegacyLayout is the error about a queue partitioned by the version before this one.
var errLegacyLayout = jobstate.ErrLegacyLayout

// parsePartitions reads queue's stored partition count v.
func parsePartitions(queue, v string) (int, error) { return jobstate.ParsePartitions(queue, v) }

// allPartitions returns the keys of every partition of queue, in partition order.
func allPartitions(prefix, queue string, p int) []keys.Queue {
	qs := make([]keys.Queue, max(1, p))
	for i := range qs {
		qs[i] = keys.New(prefix, keys.PartitionName(queue, i, p))
	}
	return qs
}

// lookupOrder returns the partitions of queue in the order a lookup of job id tries them. The
// one the id routes to is first, since only a job published with a unique key lives elsewhere.
func lookupOrder(prefix, queue, id string, p int) []keys.Queue {
	qs := allPartitions(prefix, queue, p)
	if h := keys.PartitionOf(id, p); h > 0 {
		qs[0], qs[h] = qs[h], qs[0]
	}
	return qs
}

// findJob reads job id from the first of qs that has it: qs[0] alone first, then the others
// in one pipeline. So a lookup costs one round trip when the job is where its id routes, and
// two otherwise. It returns the partition that holds the job.
func findJob(ctx context.Context, js jobstate.Backend, qs []keys.Queue, id string) (*Job, keys.Queue, error) {
	j, err := getJob(ctx, js, qs[0], id)
	if len(qs) == 1 || !errors.Is(err, ErrNotFound) {
		return j, qs[0], err
	}
	lookups := make([]jobstate.Lookup, len(qs)-1)
	for k, q := range qs[1:] {
		lookups[k] = jobstate.Lookup{Queue: q, ID: id}
	}
	k, rec, err := js.FindFirst(ctx, lookups)
	if err != nil {
		return nil, qs[0], fmt.Errorf("get %s/%s: %w", qs[0].Name(), id, err)
	}
	if k < 0 {
		return nil, qs[0], ErrNotFound
	}
	j, err = jobFromRecord(qs[k+1].Name(), id, rec)
	return j, qs[k+1], err
}

// onPartition runs op on the partition of qs (lookupOrder) that holds job id. It tries qs[0]
// first. When op says ErrNotFound there, it tries the one jobstate.Store.Locate finds.
func onPartition(ctx context.Context, js jobstate.Backend, qs []keys.Queue, id string, op func(keys.Queue) error) error {
	err := op(qs[0])
	if len(qs) == 1 || !errors.Is(err, ErrNotFound) {
		return err
	}
	at, lerr := js.Locate(ctx, qs[1:], []string{id})
	if lerr != nil {
		return fmt.Errorf("find %s/%s: %w", qs[0].Name(), id, lerr)
	}
	if at[0] < 0 {
		return err
	}
	return op(qs[1+at[0]])
}

// sumStats adds the gauges and counters of a queue's partitions into the queue's.
func sumStats(queue string, parts []*QueueStats) *QueueStats {
	if len(parts) == 1 {
		return parts[0]
	}
	s := &QueueStats{Queue: queue}
	for _, p := range parts {
		s.Scheduled += p.Scheduled
		s.Queued += p.Queued
		s.InProgress += p.InProgress
		s.Dead += p.Dead
		s.Enqueued += p.Enqueued
		s.Completed += p.Completed
		s.Failed += p.Failed
		s.Retried += p.Retried
		s.Recovered += p.Recovered
		s.DeadByRecovery += p.DeadByRecovery
		s.Refused += p.Refused
		s.Canceled += p.Canceled
		s.Released += p.Released
		s.Poison += p.Poison
		s.Debounced += p.Debounced
		s.Limited += p.Limited
		s.GroupWaiting += p.GroupWaiting
	}
	return s
}

// queueStats reads and sums the stats of every partition of queue.
func queueStats(ctx context.Context, js jobstate.Backend, prefix, queue string, p int) (*QueueStats, error) {
	st, err := readStats(ctx, js, allPartitions(prefix, queue, p))
	if err != nil {
		return nil, err
	}
	return sumStats(queue, st), nil
}

// QueueOptions are the settings of a queue that CreateQueue stores in Redis, where every
// producer, worker and inspector reads them.
type QueueOptions struct {
	// Partitions is the number of partitions (0 means 1, the plain queue; at most
	// MaxPartitions). Each partition is a key space of its own, {queue#i.s}. It has its own
	// stream, scheduled set, dead set, counters, unique keys and recovery lock. Its slot is the
	// middle one of the i-th of P equal shares of the slots (keys.PartitionName). So on Redis
	// Cluster with the default slot layout every master holds a partition when P >= masters. A
	// queue of one partition keeps the plain keys {queue}.
	Partitions int
	// Drain is how long a change of the partition count waits for what the old layout holds
	// to go: its live jobs to run and records to expire. The old layout is closed to publishes
	// meanwhile, so publishes to the queue wait too. A Client retries a refused publish for up
	// to 5 s, so keep Drain below that. 0 refuses at once when anything is left (CreateQueue).
	Drain time.Duration
}

// QueueInfo is a queue's stored settings.
type QueueInfo struct {
	Queue      string `json:"queue"`
	Partitions int    `json:"partitions"`
	// Nodes, on Redis Cluster, is the address of the master that holds each partition (in
	// partition order) when CreateQueue answered: a reshard may move them later.
	Nodes []string `json:"nodes,omitempty"`
}

// CreateQueue stores queue's settings and adds it to the known queues. Setting what is set
// already does nothing and succeeds.
//
// Changing the partition count moves nothing but the counters. Every job and record lives in
// the partition keys of the layout it was written in, which the new layout does not read. So
// the change is refused while the queue holds anything a job left in its layout. That is
// scheduled, queued or in-progress jobs, dead jobs, or finished records. Finished records are
// completed or canceled jobs kept for their retention, or their tombstones, which make a
// resent publish a duplicate. The error wraps ErrQueueBusy and says how many of each; nothing
// changes. Live jobs go by running, dead ones by a replay or a purge, finished records by
// expiring; DeleteQueue removes them all. Once they are gone the change goes through. The
// counters of the old partitions are then added to the new layout's. The group settings
// (SetGroups) are carried into it. A change to more than one partition is refused while the
// queue has limits (SetLimit), with an error wrapping ErrInvalid naming them. A partitioned
// queue cannot hold limits; the new layout's admission would not read them.
//
// Producers need not stop. The old layout is closed to publishes before it is checked. A
// publish refused there is sent again to the layout the count then names (see Client).
// opts.Drain lets the change wait for what is left to go. Every Client of this process reads
// the new count on its next call. A Client elsewhere reads it within 5 seconds (at once when
// it publishes). A running Worker follows the change by itself within about 5 seconds (see
// Worker.Run); no restart is needed. One change of a queue's count runs at a time; another is
// refused with ErrQueueBusy. On Redis Cluster the answer's Nodes say which master holds each
// partition.
func (i *Inspector) CreateQueue(ctx context.Context, queue string, opts QueueOptions) (*QueueInfo, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	p := opts.Partitions
	if p == 0 {
		p = 1
	}
	if p < 1 || p > MaxPartitions {
		return nil, invalid("partitions %d outside 1..%d", opts.Partitions, MaxPartitions)
	}
	unlock, err := i.lockLayout(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, err)
	}
	defer unlock()
	cur, err := partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	if cur != p {
		err = i.limitsAllowPartitions(ctx, queue, cur, p)
		if err == nil {
			err = i.changePartitions(ctx, queue, cur, p, opts.Drain)
		}
	} else {
		// The count it has: make sure its layout is open, which repairs a change that
		// stopped half-way (the old layout closed, the count not yet written).
		err = setClosed(ctx, i.rdb, allPartitions(i.cfg.Prefix, queue, p), false)
	}
	if err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, err)
	}
	if err := addQueue(ctx, i.store, queue, i.cfg.MaxQueues, false); err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, err)
	}
	nodes, err := jobstate.Nodes(ctx, i.rdb, allPartitions(i.cfg.Prefix, queue, p))
	if err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, err)
	}
	return &QueueInfo{Queue: queue, Partitions: p, Nodes: nodes}, nil
}

// changePartitions changes queue's layout from cur partitions to p, once the old layout holds
// no job and no record (CreateQueue). It moves the counters to the new layout's first
// partition. The old layout is closed first (keys.Queue.Closed). A publish that reaches it
// from then on is refused and sent again to the layout the count then names. So the check
// below sees every job the old layout will ever hold. A check that finds any opens the old
// layout again; one that finds none opens the new layout, then writes the count.
func (i *Inspector) changePartitions(ctx context.Context, queue string, cur, p int, drain time.Duration) error {
	old := allPartitions(i.cfg.Prefix, queue, cur)
	if err := setClosed(ctx, i.rdb, old, true); err != nil {
		return fmt.Errorf("close the old partitions: %w", err)
	}
	reopen := func(err error) error {
		if rerr := setClosed(context.WithoutCancel(ctx), i.rdb, old, false); rerr != nil {
			return errors.Join(err, fmt.Errorf("open the old partitions again (queues create with the old count does): %w", rerr))
		}
		return err
	}
	deadline := time.Now().Add(drain)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := oldLayoutEmpty(ctx, i.store, queue, old, p)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrQueueBusy) || time.Now().Add(wait).After(deadline) {
			return reopen(err)
		}
		select {
		case <-ctx.Done():
			return reopen(ctx.Err())
		case <-time.After(wait):
		}
	}
	next := allPartitions(i.cfg.Prefix, queue, p)
	if err := jobstate.MoveCounters(ctx, i.rdb, old, next[0]); err != nil {
		return reopen(err)
	}
	// Every partition holds the same group settings (SetGroups writes them to each). Each
	// partition's scripts read only their own, so the new layout gets them all before it opens.
	if err := jobstate.CopyGroupSettings(ctx, i.rdb, old[0], next); err != nil {
		return reopen(err)
	}
	if err := setClosed(ctx, i.rdb, next, false); err != nil {
		return reopen(fmt.Errorf("open the new partitions: %w", err))
	}
	if err := jobstate.WritePartitions(ctx, i.rdb, i.cfg.Prefix, queue, p); err != nil {
		return reopen(fmt.Errorf("write the count: %w", err))
	}
	layoutChanges.Add(1)
	// Workers read the counts every partitionsCheckEvery anyway: a lost notice only delays them.
	_ = i.settingsChanged(ctx, queue)
	// The change is done. A copy left behind by a failure here is harmless: no script reads
	// the old layout, and a change back to it replaces its settings first.
	_ = jobstate.DeleteGroupSettings(ctx, i.rdb, old)
	return nil
}

// oldLayoutEmpty says whether the partitions old of queue hold nothing a job left, and if
// they do, returns an error wrapping ErrQueueBusy that says how much of what.
func oldLayoutEmpty(ctx context.Context, js jobstate.Backend, queue string, old []keys.Queue, p int) error {
	st, err := readStats(ctx, js, old)
	if err != nil {
		return err
	}
	sum := sumStats(queue, st)
	records := 0
	for _, q := range old {
		n, err := js.ScanKeys(ctx, q.JobPrefix(), false, false)
		if err != nil {
			return fmt.Errorf("count the job records: %w", err)
		}
		records += n
	}
	// Every job has a record; those that are not live or dead are finished ones.
	finished := max(0, int64(records)-sum.Scheduled-sum.Queued-sum.InProgress-sum.Dead)
	if sum.Scheduled+sum.Queued+sum.InProgress+sum.Dead+finished > 0 {
		return fmt.Errorf("%w: cannot change its partitions from %d to %d while its %d partition(s) hold %d scheduled, %d queued, %d in-progress and %d dead jobs and %d finished records (completed or canceled, or their tombstones), which the new layout would not see: let the live jobs run, replay or purge the dead ones, and wait for the finished records' retention to end, or delete the queue first",
			ErrQueueBusy, len(old), p, len(old), sum.Scheduled, sum.Queued, sum.InProgress, sum.Dead, finished)
	}
	return nil
}

// layoutLockTTL bounds how long a crashed change keeps others out.
const layoutLockTTL = 30 * time.Second

// lockLayout takes the lock that lets one change of queue's partition count run at a time, or
// refuses with ErrQueueBusy. Two interleaved would open a layout the other just closed.
func (i *Inspector) lockLayout(ctx context.Context, queue string) (func(), error) {
	token := strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.FormatUint(rand.Uint64(), 36)
	ok, err := jobstate.LockLayout(ctx, i.rdb, i.cfg.Prefix, queue, token, layoutLockTTL)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: another change of its partition count, limits or group settings is running", ErrQueueBusy)
	}
	return func() {
		jobstate.UnlockLayout(context.WithoutCancel(ctx), i.rdb, i.cfg.Prefix, queue, token)
	}, nil
}

// layoutWait bounds how long holdLayout waits for a change of the partition count to end. A
// change waits at most its Drain, which publishers wait out too, and so is kept below 5 s.
const layoutWait = 6 * time.Second

// holdLayout takes queue's layout lock for a change of the settings that a change of its
// partition count carries or checks (SetLimit, SetGroups). So the two never interleave: a
// setting written to the old layout after the change read it would be left behind. Unlike
// CreateQueue, it waits for the lock, up to layoutWait; these changes hold it for a few round
// trips.
func (i *Inspector) holdLayout(ctx context.Context, queue string) (func(), error) {
	deadline := time.Now().Add(layoutWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		unlock, err := i.lockLayout(ctx, queue)
		if err == nil || !errors.Is(err, ErrQueueBusy) || time.Now().Add(wait).After(deadline) {
			return unlock, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Partitions returns how many partitions queue has (1 for a queue never given more).
func (i *Inspector) Partitions(ctx context.Context, queue string) (int, error) {
	if err := i.check(queue, ""); err != nil {
		return 0, err
	}
	return partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
}
