package jobstate

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// MemoryParams asks what a queue's partitions take in memory: Queues with, for each, its
// priority levels above 1 (QueueLevels). Samples is MEMORY USAGE's SAMPLES; Records how many
// job records to measure per partition.
type MemoryParams struct {
	Queues  []keys.Queue
	Levels  [][]int
	Samples int
	Records int
}

// Memory is a queue's measured memory: its streams, sets and stats hash (Keys), and Sampled
// job records that took RecordBytes together.
type Memory struct {
	Keys        int64
	RecordBytes int64
	Sampled     int
}

// QueueMemory measures p.Queues in two pipelines: the keys, with a few ids of the dead and
// scheduled sets, then the records of those ids. Redis estimates a big stream or set from
// p.Samples of its elements, so a queue of millions of jobs costs what an empty one does.
func (s *Store) QueueMemory(ctx context.Context, p MemoryParams) (Memory, error) {
	var m Memory
	var sizes []*redis.IntCmd
	var picks []*redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for k, q := range p.Queues {
			ks := []string{q.Stream(), q.Scheduled(), q.Dead(), q.Stats()}
			for _, l := range p.Levels[k] {
				ks = append(ks, q.LevelStream(l))
			}
			for _, key := range ks {
				sizes = append(sizes, pipe.MemoryUsage(ctx, key, p.Samples))
			}
			picks = append(picks, pipe.ZRange(ctx, q.Dead(), 0, int64(p.Records-1)),
				pipe.ZRange(ctx, q.Scheduled(), 0, int64(p.Records-1)))
		}
		return nil
	})
	if err = memoryErr(err, sizes); err != nil {
		return m, err
	}
	for _, c := range sizes {
		m.Keys += c.Val() // a key that does not exist answers nil: 0
	}
	var records []*redis.IntCmd
	_, err = s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for k, q := range p.Queues {
			ids := append(picks[2*k].Val(), picks[2*k+1].Val()...)
			for _, id := range ids[:min(p.Records, len(ids))] {
				records = append(records, pipe.MemoryUsage(ctx, q.Job(id), p.Samples))
			}
		}
		return nil
	})
	if err = memoryErr(err, records); err != nil {
		return m, err
	}
	for _, c := range records {
		if c.Err() == nil {
			m.RecordBytes += c.Val()
			m.Sampled++
		}
	}
	return m, nil
}

// memoryErr is the first error of a pipeline of MEMORY USAGE calls other than a key's absence
// (nil: the key is gone, as a job record may be by now).
func memoryErr(err error, cmds []*redis.IntCmd) error {
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
			return rediserr.Wrap("memory usage", e)
		}
	}
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return rediserr.Wrap("memory usage", err)
}
