package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/keyring"
)

// maxPartitions bounds QueueOptions.Partitions.
const maxPartitions = keys.MaxPartitions

// findJob reads job id from the first of qs that has it (publish.Find), and returns the
// partition that holds it.
func findJob(ctx context.Context, js jobstate.Backend, qs []keys.Queue, id string, kr *keyring.Keyring) (*Job, keys.Queue, error) {
	k, rec, err := publish.Find(ctx, js, qs, id)
	if err != nil || k < 0 {
		return nil, qs[0], cmp.Or(err, ErrNotFound)
	}
	j, err := jobFromRecord(qs[k].Name(), id, rec, kr)
	return j, qs[k], err
}

// queueStats reads and sums the stats of every partition of queue.
func queueStats(ctx context.Context, js jobstate.Backend, prefix, queue string, p int) (*QueueStats, error) {
	st, err := js.ReadStats(ctx, jobstate.PartitionKeys(prefix, queue, p))
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
	cur, err := jobstate.PartitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	err = i.store.SetPartitions(ctx, jobstate.LayoutChange{Queue: queue, From: cur, To: p, Drain: opts.Drain})
	if err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, storeErr(err))
	}
	if cur != p {
		publish.Relayout() // this process's Clients read the new count on their next call
	}
	if err := addQueue(ctx, i.store, queue, i.cfg.MaxQueues, false); err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, err)
	}
	nodes, err := jobstate.Nodes(ctx, i.rdb, jobstate.PartitionKeys(i.cfg.Prefix, queue, p))
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
	return jobstate.PartitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
}
