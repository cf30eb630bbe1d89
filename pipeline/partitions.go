package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// maxPartitions bounds QueueOptions.Partitions.
const maxPartitions = keys.MaxPartitions

// partitionsTTL is how long a Client trusts the partition count it read for a queue before it
// reads it again. So a count changed with CreateQueue in another process reaches every reader
// within this time. A publish does not depend on it. One to a layout that a change left is
// refused by its closed flag, and sent again with the count read again (Client.publish).
const partitionsTTL = 5 * time.Second

// layoutChanges counts the partition counts that CreateQueue and DeleteQueue changed in this
// process. A Client's cached count read before the latest change is stale at once. So a
// process that changes a count reads its own change on its next call.
var layoutChanges atomic.Int64

// partitionCount reads how many partitions queue has (1 when none was set).
func partitionCount(ctx context.Context, rdb redis.Cmdable, prefix, queue string) (int, error) {
	return jobstate.PartitionCount(ctx, rdb, prefix, queue)
}

// knownQueues reads the known queue names, sorted, and the partition counts of those that have
// more than one, in one round trip (jobstate.Store.KnownQueues).
func knownQueues(ctx context.Context, js jobstate.Backend) ([]string, map[string]int, error) {
	return js.KnownQueues(ctx)
}

// allPartitions returns the keys of every partition of queue, in partition order.
func allPartitions(prefix, queue string, p int) []keys.Queue {
	return jobstate.PartitionKeys(prefix, queue, p)
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

// queueStats reads and sums the stats of every partition of queue.
func queueStats(ctx context.Context, js jobstate.Backend, prefix, queue string, p int) (*QueueStats, error) {
	st, err := js.ReadStats(ctx, allPartitions(prefix, queue, p))
	if err != nil {
		return nil, err
	}
	return (*QueueStats)(inspect.SumStats(queue, st)), nil
}

// QueueOptions are the settings of a queue that CreateQueue stores in Redis, where every
// producer, worker and inspector reads them.
type QueueOptions struct {
	// Partitions is the number of partitions (0 means 1, the plain queue; at most
	// 1,024). Each partition is a key space of its own, {queue#i.s}. It has its own
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
	done, err := i.apply(ctx, queue, queueChange{layout: &opts})
	return done.info, err
}

// setLayout is CreateQueue's part of a change (apply): the store changes the count under the
// queue's layout lock (jobstate.Store.SetPartitions), then the queue is made known.
func (i *Inspector) setLayout(ctx context.Context, queue string, opts QueueOptions) (*QueueInfo, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	p := opts.Partitions
	if p == 0 {
		p = 1
	}
	if p < 1 || p > maxPartitions {
		return nil, invalid("partitions %d outside 1..%d", opts.Partitions, maxPartitions)
	}
	unlock, err := i.store.LockLayout(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, storeErr(err))
	}
	defer unlock()
	cur, err := partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	err = i.store.SetPartitions(ctx, jobstate.LayoutChange{Queue: queue, From: cur, To: p, Drain: opts.Drain})
	if err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, storeErr(err))
	}
	if cur != p {
		layoutChanges.Add(1)
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

// Partitions returns how many partitions queue has (1 for a queue never given more).
func (i *Inspector) Partitions(ctx context.Context, queue string) (int, error) {
	if err := i.check(queue, ""); err != nil {
		return 0, err
	}
	return partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
}
