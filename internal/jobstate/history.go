package jobstate

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/rediserr"
)

// HistoryCount is an amount to add to one field of a history bucket.
type HistoryCount struct {
	Field string
	N     int64
}

// HistoryBucket is what to add to one bucket of a queue's history (keys.Queue.History or
// keys.HistoryAll), and when the bucket expires.
type HistoryBucket struct {
	Key      string
	Counts   []HistoryCount
	ExpireAt time.Time
}

// AddHistory adds bs to their buckets and sets their expiry, in one pipeline. Its error is the
// pipeline's, unwrapped: the history's writer logs it once per outage.
func (s *Store) AddHistory(ctx context.Context, bs []HistoryBucket) error {
	pipe := s.rdb.Pipeline()
	for _, b := range bs {
		for _, c := range b.Counts {
			pipe.HIncrBy(ctx, b.Key, c.Field, c.N)
		}
		pipe.ExpireAt(ctx, b.Key, b.ExpireAt)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// ReadHistory reads the history buckets named by ks, in one pipeline: each bucket's fields
// (empty for a bucket that does not exist).
func (s *Store) ReadHistory(ctx context.Context, ks []string) ([]map[string]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ks))
	for k, key := range ks {
		cmds[k] = pipe.HGetAll(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, rediserr.Wrap("history", err)
	}
	out := make([]map[string]string, len(cmds))
	for k, c := range cmds {
		out[k] = c.Val()
	}
	return out, nil
}
