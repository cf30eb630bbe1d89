package jobstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// BeatParams is one heartbeat of a worker: its record (pipeline's encoding), kept for TTL, and
// the index entries of workers silent since PruneBefore, which are dropped.
type BeatParams struct {
	Name        string
	Record      []byte
	TTL         time.Duration
	Now         time.Time
	PruneBefore time.Time
}

// WriteBeat writes a worker's heartbeat record and its index entry (keys.Workers), scored by
// when the record expires, in one round trip.
func (s *Store) WriteBeat(ctx context.Context, p BeatParams) error {
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, keys.WorkerBeat(s.prefix, p.Name), p.Record, p.TTL)
		pipe.ZAdd(ctx, keys.Workers(s.prefix), redis.Z{Score: float64(p.Now.Add(p.TTL).UnixMilli()), Member: p.Name})
		pipe.ZRemRangeByScore(ctx, keys.Workers(s.prefix), "-inf", fmt.Sprint(p.PruneBefore.UnixMilli()))
		return nil
	})
	return err
}

// EndBeat removes a worker's heartbeat record and index entry: a worker that stops says so at
// once rather than after its TTL.
func (s *Store) EndBeat(ctx context.Context, name string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, keys.WorkerBeat(s.prefix, name))
		p.ZRem(ctx, keys.Workers(s.prefix), name)
		return nil
	})
	return err
}

// Beat is one live worker's heartbeat record and how long it has left (0: unknown).
type Beat struct {
	Name   string
	Record string
	Left   time.Duration
}

// Beats reads the heartbeat records of the workers in the index, in index order: two round
// trips whatever their number. Index entries whose record expired are removed as found; that
// removal is housekeeping, and its failure is left to the next read or beat.
func (s *Store) Beats(ctx context.Context) ([]Beat, error) {
	index := keys.Workers(s.prefix)
	names, err := s.rdb.ZRange(ctx, index, 0, -1).Result()
	if err != nil || len(names) == 0 {
		return nil, rediserr.Wrap("workers", err)
	}
	type reply struct {
		rec *redis.StringCmd
		ttl *redis.DurationCmd
	}
	replies := make([]reply, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, n := range names {
			key := keys.WorkerBeat(s.prefix, n)
			replies[k] = reply{p.Get(ctx, key), p.PTTL(ctx, key)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, rediserr.Wrap("workers", err)
	}
	out := make([]Beat, 0, len(names))
	var gone []any
	for k, r := range replies {
		rec, err := r.rec.Result()
		if errors.Is(err, redis.Nil) {
			gone = append(gone, names[k])
			continue
		}
		if err != nil {
			return nil, rediserr.Wrap("workers", err)
		}
		b := Beat{Name: names[k], Record: rec}
		if left, err := r.ttl.Result(); err == nil && left > 0 {
			b.Left = left
		}
		out = append(out, b)
	}
	if len(gone) > 0 {
		_ = s.rdb.ZRem(ctx, index, gone...).Err()
	}
	return out, nil
}
