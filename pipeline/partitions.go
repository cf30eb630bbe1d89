package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// MaxPartitions bounds QueueOptions.Partitions.
const MaxPartitions = keys.MaxPartitions

// partitionsTTL is how long a Client trusts the partition count it read for a queue before it
// reads it again: a count changed with CreateQueue reaches every producer within this time.
const partitionsTTL = 5 * time.Second

// partitionCount reads how many partitions queue has (1 when none was set).
func partitionCount(ctx context.Context, rdb redis.Cmdable, prefix, queue string) (int, error) {
	v, err := rdb.HGet(ctx, keys.Partitions(prefix), queue).Result()
	if errors.Is(err, redis.Nil) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the partition count of %s: %w", queue, err)
	}
	return parsePartitions(queue, v)
}

// knownQueues reads the known queue names that are valid queue names (one written by hand
// names no keys of ours), sorted, and the partition counts of those that have more than one,
// in one round trip.
func knownQueues(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, map[string]int, error) {
	var names *redis.StringSliceCmd
	var m *redis.MapStringStringCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		names = p.SMembers(ctx, keys.Queues(prefix))
		m = p.HGetAll(ctx, keys.Partitions(prefix))
		return nil
	})
	if err := names.Err(); err != nil {
		return nil, nil, fmt.Errorf("list queues: %w", err)
	}
	if err := m.Err(); err != nil {
		return nil, nil, fmt.Errorf("read the partition counts: %w", err)
	}
	qs := slices.DeleteFunc(names.Val(), func(n string) bool { return keys.ValidateQueue(n) != nil })
	slices.Sort(qs)
	counts := make(map[string]int, len(m.Val()))
	for q, v := range m.Val() {
		p, err := parsePartitions(q, v)
		if err != nil {
			return nil, nil, err
		}
		counts[q] = p
	}
	return qs, counts, nil
}

func parsePartitions(queue, v string) (int, error) {
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > MaxPartitions {
		return 0, fmt.Errorf("partition count of %s in Redis is %q, not a number in 1..%d", queue, v, MaxPartitions)
	}
	return p, nil
}

// allPartitions returns the keys of every partition of queue, in partition order.
func allPartitions(prefix, queue string, p int) []keys.Queue {
	qs := make([]keys.Queue, max(1, p))
	for i := range qs {
		qs[i] = keys.New(prefix, keys.PartitionName(queue, i, p))
	}
	return qs
}

// lookupOrder returns the partitions of queue in the order a lookup of job id tries them: the
// one the id routes to first, since only a job published with a unique key lives elsewhere.
func lookupOrder(prefix, queue, id string, p int) []keys.Queue {
	qs := allPartitions(prefix, queue, p)
	if h := keys.PartitionOf(id, p); h > 0 {
		qs[0], qs[h] = qs[h], qs[0]
	}
	return qs
}

// findJob reads job id from the first of qs that has it: qs[0] alone first, then the others in
// one pipeline, so a lookup costs one round trip when the job is where its id routes and two
// otherwise. It returns the partition that holds the job.
func findJob(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue, id string) (*Job, keys.Queue, error) {
	j, err := getJob(ctx, rdb, qs[0], id)
	if len(qs) == 1 || !errors.Is(err, ErrNotFound) {
		return j, qs[0], err
	}
	calls := make([]script.Call, len(qs)-1)
	for k, q := range qs[1:] {
		calls[k] = jobstate.GetCall(q, id)
	}
	cmds, err := script.Pipelined(ctx, rdb, calls)
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, qs[0], fmt.Errorf("get %s/%s: %w", qs[0].Name(), id, err)
	}
	for k, cmd := range cmds {
		flat, found, err := jobstate.GetReply(cmd)
		if err != nil {
			return nil, qs[0], fmt.Errorf("get %s/%s: %w", qs[0].Name(), id, err)
		}
		if found {
			j, err := jobFromHash(qs[k+1].Name(), id, flat)
			return j, qs[k+1], err
		}
	}
	return nil, qs[0], ErrNotFound
}

// locateJobs finds which of qs holds each of ids with one pipeline of EXISTS (len(ids) x
// len(qs) commands). A job found in none maps to -1.
func locateJobs(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue, ids []string) ([]int, error) {
	cmds := make([]*redis.IntCmd, len(ids)*len(qs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, id := range ids {
			for n, q := range qs {
				cmds[k*len(qs)+n] = p.Exists(ctx, q.Job(id))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	at := make([]int, len(ids))
	for k := range ids {
		at[k] = -1
		for n := range qs {
			if cmds[k*len(qs)+n].Val() > 0 {
				at[k] = n
				break
			}
		}
	}
	return at, nil
}

// onPartition runs op on the partition of qs (lookupOrder) that holds job id: on qs[0] first,
// and when op says ErrNotFound there, on the partition that locateJobs finds among the others.
func onPartition(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue, id string, op func(keys.Queue) error) error {
	err := op(qs[0])
	if len(qs) == 1 || !errors.Is(err, ErrNotFound) {
		return err
	}
	at, lerr := locateJobs(ctx, rdb, qs[1:], []string{id})
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
	}
	return s
}

// queueStats reads and sums the stats of every partition of queue.
func queueStats(ctx context.Context, rdb redis.UniversalClient, prefix, queue string, p int) (*QueueStats, error) {
	st, err := readStats(ctx, rdb, allPartitions(prefix, queue, p))
	if err != nil {
		return nil, err
	}
	return sumStats(queue, st), nil
}

// QueueOptions are the settings of a queue that CreateQueue stores in Redis, where every
// producer, worker and inspector reads them.
type QueueOptions struct {
	// Partitions is the number of partitions (0 means 1, the plain queue; at most
	// MaxPartitions). Each partition is a key space of its own, {queue#i}, with its own stream,
	// scheduled set, dead set, counters, unique keys and recovery lock, so on Redis Cluster the
	// partitions of one queue spread over shards (DESIGN.md "Scale"). A queue of one partition
	// keeps the plain keys {queue}.
	Partitions int
}

// QueueInfo is a queue's stored settings.
type QueueInfo struct {
	Queue      string `json:"queue"`
	Partitions int    `json:"partitions"`
}

// CreateQueue stores queue's settings and adds it to the known queues. Setting what is set
// already does nothing and succeeds. Changing the partition count of a queue that has
// unfinished jobs (scheduled, queued or in progress, in any partition) is refused with an
// error wrapping ErrQueueBusy, and changes nothing: those jobs live in the old partitions,
// which workers of the new count do not read.
//
// The check and the change are not atomic: stop the queue's producers and workers, change the
// count, start them again. A Client reads a queue's count again every 5 seconds, a Worker only
// when it starts (it logs an error when it sees the count change under it).
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
	cur, err := partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	if cur != p {
		st, err := queueStats(ctx, i.rdb, i.cfg.Prefix, queue, cur)
		if err != nil {
			return nil, fmt.Errorf("create queue %s: %w", queue, err)
		}
		if st.Scheduled+st.Queued+st.InProgress > 0 {
			return nil, fmt.Errorf("create queue %s: %w: cannot change its partitions from %d to %d while it has %d scheduled, %d queued and %d in-progress jobs",
				queue, ErrQueueBusy, cur, p, st.Scheduled, st.Queued, st.InProgress)
		}
		if p == 1 {
			err = i.rdb.HDel(ctx, keys.Partitions(i.cfg.Prefix), queue).Err()
		} else {
			err = i.rdb.HSet(ctx, keys.Partitions(i.cfg.Prefix), queue, p).Err()
		}
		if err != nil {
			return nil, fmt.Errorf("create queue %s: %w", queue, err)
		}
	}
	if err := addQueue(ctx, i.rdb, i.cfg.Prefix, queue, i.cfg.MaxQueues, false); err != nil {
		return nil, fmt.Errorf("create queue %s: %w", queue, err)
	}
	return &QueueInfo{Queue: queue, Partitions: p}, nil
}

// Partitions returns how many partitions queue has (1 for a queue never given more).
func (i *Inspector) Partitions(ctx context.Context, queue string) (int, error) {
	if err := i.check(queue, ""); err != nil {
		return 0, err
	}
	return partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
}
