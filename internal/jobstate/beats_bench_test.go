package jobstate_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// BenchmarkWriteBeat measures a heartbeat's cost to Redis and to the worker: the beat script
// (record, index and sightings of 2 queues and 6 types, beat.lua) against the three pipelined
// commands a beat was before sightings (record and index only). redis-us/op is the server's
// time per beat (INFO commandstats: the calls' usec summed over the beats). One beat per worker
// every 5 s: docs/BENCHMARKS.md has the figures.
func BenchmarkWriteBeat(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := b.Context()
	prefix := "bench"
	s := jobstate.NewStore(rdb, prefix)
	rec := []byte(`{"name":"w1","host":"h","pid":1,"version":"(devel)","queues":["emails","default"],"types":["echo","fail","flaky","http","noop","sleep"],"concurrency":10,"running":[],"running_more":0}`)
	usec := func() float64 {
		info := rdb.InfoMap(ctx, "commandstats").Val()["Commandstats"]
		var sum float64
		for _, v := range info {
			for f := range strings.SplitSeq(v, ",") {
				if x, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseFloat(x, 64)
					sum += n
				}
			}
		}
		return sum
	}
	for _, bc := range []struct {
		name string
		beat func(now time.Time) error
	}{
		{"script", func(now time.Time) error {
			return s.WriteBeat(ctx, jobstate.BeatParams{Name: "w1", Record: rec, TTL: 15 * time.Second, Now: now,
				PruneBefore: now.Add(-time.Minute), Queues: []string{"emails", "default"},
				Types: []string{"echo", "fail", "flaky", "http", "noop", "sleep"}, SeenFor: 24 * time.Hour})
		}},
		{"script-no-sightings", func(now time.Time) error {
			return s.WriteBeat(ctx, jobstate.BeatParams{Name: "w1", Record: rec, TTL: 15 * time.Second, Now: now,
				PruneBefore: now.Add(-time.Minute), SeenFor: 24 * time.Hour})
		}},
		{"pipeline-before", func(now time.Time) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, keys.WorkerBeat(prefix, "w1"), rec, 15*time.Second)
				p.ZAdd(ctx, keys.Workers(prefix), redis.Z{Score: float64(now.Add(15 * time.Second).UnixMilli()), Member: "w1"})
				p.ZRemRangeByScore(ctx, keys.Workers(prefix), "-inf", fmt.Sprint(now.Add(-time.Minute).UnixMilli()))
				return nil
			})
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := bc.beat(time.Now()); err != nil { // loads the script
				b.Fatal(err)
			}
			rdb.ConfigResetStat(ctx)
			for b.Loop() {
				if err := bc.beat(time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(usec()/float64(b.N), "redis-us/op")
		})
	}
}
