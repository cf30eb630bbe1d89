package jobstate_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// unrelatedLimits writes n type limits of types no job of the tests has into q's limits hash,
// and one field that does not decode, in one HSET: the limits of other scopes a call must not
// read.
func unrelatedLimits(tb testing.TB, rdb redis.UniversalClient, q keys.Queue, n int) {
	tb.Helper()
	vals := make([]any, 0, 2*n+2)
	for k := range n {
		f, v := jobstate.EncodeLimit(jobstate.Limit{Type: "other-" + strconv.Itoa(k), Concurrency: 1})
		vals = append(vals, f, v)
	}
	vals = append(vals, "t:broken", "{not json")
	require.NoError(tb, rdb.HSet(tb.Context(), q.Limits(), vals...).Err())
}

// admit.lua and leases.lua read only the fields of the scopes of the call's jobs and
// instances, never the whole limits hash: with thousands of other limits (and one that does
// not decode) beside them, a job is held to its own limits exactly, and no HGETALL runs.
func TestAdmitReadsOnlyTheJobsScopes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lq := &leaseQueue{t: t, rdb: srv.Client(t), q: keys.New(keys.DefaultPrefix, redistest.UniqueName(t))}
	ctx := t.Context()
	require.NoError(t, lq.rdb.XGroupCreateMkStream(ctx, lq.q.Stream(), keys.Group, "0").Err())
	require.NoError(t, jobstate.SetLimit(ctx, lq.rdb, lq.q, jobstate.Limit{Concurrency: 2}, time.Now()))
	require.NoError(t, jobstate.SetLimit(ctx, lq.rdb, lq.q, jobstate.Limit{Type: "t", PerKey: true,
		Rate: 1, Interval: time.Hour}, time.Now()))
	unrelatedLimits(t, lq.rdb, lq.q, 5000)
	require.NoError(t, lq.rdb.ConfigResetStat(ctx).Err())

	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	tk := jobstate.LimitInstance("tk:t", "t", "acme")
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0, 1, 2}}, {Inst: tk, Tokens: 3}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 2}, {Tokens: 1}}, res.Grants, "each scope's own limit")
	granted := res.Stamp
	a.Known = true
	items := lq.read("acme", "j1", "j2")
	res = lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", SlotsAside: 2}, {Inst: tk, TokensAside: 1}}, items)
	require.Equal(t, []script.Code{script.OK, script.Deferred}, codes(res.Jobs), "the key's rate of 1 an hour")
	require.False(t, res.Jobs[1].Due.IsZero(), "deferred by the rate, to a time")
	lq.keep(a, false, jobstate.LeaseReturn{Inst: tk, Tokens: []jobstate.TokenReturn{{Stamp: granted, N: 1}}}, jobstate.LeaseReturn{Inst: "q", Names: []int{1}})

	stats, err := lq.rdb.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	require.NotContains(t, stats, "cmdstat_hgetall:", "no script read the whole limits hash")
	require.Contains(t, stats, "cmdstat_hmget:")
}

// BenchmarkAdmitManyLimits: one admit.lua call of a batch of 100 jobs granted from a worker's
// leases, on a queue whose limits hash holds n limits of other types beside the queue's own.
// The call's cost must not grow with n (docs/BENCHMARKS.md, "Admission with many limits").
func BenchmarkAdmitManyLimits(b *testing.B) {
	for _, n := range []int{0, 1000, 20000} {
		b.Run("limits="+strconv.Itoa(n), func(b *testing.B) {
			rdb := redistest.Client(b)
			q := keys.New(keys.DefaultPrefix, redistest.UniqueName(b))
			ctx := b.Context()
			require.NoError(b, jobstate.SetLimit(ctx, rdb, q, jobstate.Limit{Concurrency: 1_000_000}, time.Now()))
			if n > 0 {
				unrelatedLimits(b, rdb, q, n)
			}
			h := jobstate.Holder{Name: "bench/1", Lease: time.Minute}
			names := make([]int, 100)
			for k := range names {
				names[k] = k
			}
			c := jobstate.AdmitCall(&q, h, []jobstate.LeaseRequest{{Inst: "q", Names: names}}, nil)
			_, err := jobstate.AdmitReply(c.Script.Run(ctx, rdb, c.Keys, c.Args...), 1, 0)
			require.NoError(b, err)
			h.Known = true
			// Granted from the slots set aside: admit.lua reads no job, so the same items
			// serve every call.
			items := make([]jobstate.AdmitItem, 100)
			for k := range items {
				items[k] = jobstate.AdmitItem{ID: "j" + strconv.Itoa(k), Entry: "1-" + strconv.Itoa(k),
					Type: "t", Attempt: 1}
			}
			c = jobstate.AdmitCall(&q, h, []jobstate.LeaseRequest{{Inst: "q", SlotsAside: 100}}, items)
			for b.Loop() {
				res, err := jobstate.AdmitReply(c.Script.Run(ctx, rdb, c.Keys, c.Args...), 1, len(items))
				if err != nil || res.Jobs[99].Code != script.OK {
					b.Fatalf("%v %+v", err, res.Jobs[99])
				}
			}
		})
	}
}
