package jobstate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// BeatParams is one heartbeat of a worker: its record (pipeline's encoding), kept for TTL, and
// the index entries of workers silent since PruneBefore, which are dropped. Queues and Types
// are what the worker reads and handles: the beat marks each seen now, by Redis's clock, and
// drops the sightings older than SeenFor.
type BeatParams struct {
	Name        string
	Record      []byte
	TTL         time.Duration
	Now         time.Time
	PruneBefore time.Time
	Queues      []string
	Types       []string
	SeenFor     time.Duration
}

var (
	//go:embed beat.lua
	beatSrc    string
	beatScript = newScript(beatSrc)
	//go:embed seen.lua
	seenSrc    string
	seenScript = newScript(seenSrc)
)

// WriteBeat writes a worker's heartbeat record, its index entry (keys.Workers), scored by when
// the record expires, and its sightings (keys.SeenQueues, keys.SeenTypes), in one script: one
// round trip, to the one node of the workers' hash tag.
func (s *Store) WriteBeat(ctx context.Context, p BeatParams) error {
	args := make([]any, 0, 7+len(p.Queues)+len(p.Types))
	args = append(args, p.Name, p.Record, p.TTL.Milliseconds(), p.Now.Add(p.TTL).UnixMilli(), p.PruneBefore.UnixMilli(),
		p.SeenFor.Milliseconds(), len(p.Queues))
	for _, q := range p.Queues {
		args = append(args, q)
	}
	for _, t := range p.Types {
		args = append(args, t)
	}
	r, err := decode("heartbeat", beatScript.Run(ctx, s.rdb, []string{keys.WorkerBeat(s.prefix, p.Name),
		keys.Workers(s.prefix), keys.SeenQueues(s.prefix), keys.SeenTypes(s.prefix)}, args...))
	if err == nil {
		err = r.want(0)
	}
	return err
}

// Sightings is what the workers' beats have said since a window ago (Store.Sightings): the
// last time, by Redis's clock, a live worker read each queue and had a handler for each type.
type Sightings struct {
	Queues map[string]time.Time
	Types  map[string]time.Time
	// Now is Redis's clock when they were read.
	Now time.Time
}

// Sightings reads the sightings of the last window (seen.lua) in one round trip.
func (s *Store) Sightings(ctx context.Context, window time.Duration) (Sightings, error) {
	r, err := decode("sightings", seenScript.Run(ctx, s.rdb, []string{keys.SeenQueues(s.prefix), keys.SeenTypes(s.prefix)},
		window.Milliseconds()))
	if err == nil {
		err = r.want(4)
	}
	if err != nil {
		return Sightings{}, err
	}
	sec, err1 := strconv.ParseInt(r.str(0), 10, 64)
	usec, err2 := strconv.ParseInt(r.str(1), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Sightings{}, fmt.Errorf("sightings: %w", err)
	}
	out := Sightings{Now: time.Unix(sec, usec*1000)}
	if out.Queues, err = sightings(r.rest[2]); err == nil {
		out.Types, err = sightings(r.rest[3])
	}
	if err != nil {
		return Sightings{}, fmt.Errorf("sightings: %w", err)
	}
	return out, nil
}

// sightings reads a ZRANGEBYSCORE WITHSCORES reply, as a script returns it, of unix ms scores.
func sightings(v any) (map[string]time.Time, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	m := make(map[string]time.Time, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		name, _ := flat[i].(string)
		score, _ := flat[i+1].(string)
		ms, err := strconv.ParseFloat(score, 64)
		if err != nil {
			return nil, err
		}
		m[name] = time.UnixMilli(int64(ms))
	}
	return m, nil
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
