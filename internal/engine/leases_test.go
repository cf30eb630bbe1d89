package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// bookQueue is a queue with a concurrency limit and a session's lease book of it, driven by
// hand: the jobs admitted and the keeper's calls are the test's.
type bookQueue struct {
	t    *testing.T
	rdb  redis.UniversalClient
	q    keys.Queue
	book *LeaseBook
	s    *jobstate.Store
	n    int // jobs published
}

func newBookQueue(t *testing.T, holder string, lease time.Duration, l jobstate.Limit) *bookQueue {
	t.Helper()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
	require.NoError(t, jobstate.SetLimit(ctx, rdb, q, l, time.Now()))
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
	bq := &bookQueue{t: t, rdb: rdb, q: q, s: jobstate.NewStore(rdb, keys.DefaultPrefix), book: &LeaseBook{store: jobstate.NewStore(rdb, ""), log: zerolog.New(zerolog.NewTestWriter(t)),
		holder: holder, lease: lease, conc: 10, batch: 10, queues: map[string]*QueueLease{}, kick: make(chan struct{}, 1)}}
	bq.book.SetLimits(q, map[string]jobstate.Limit{jobstate.LimitField(l.Type, l.PerKey): l})
	return bq
}

// read publishes n jobs and reads them as the worker would: the jobs to admit.
func (bq *bookQueue) read(n int) []jobstate.AdmitItem {
	bq.t.Helper()
	ctx := bq.t.Context()
	for range n {
		bq.n++
		b := bq.s.Batch()
		p := b.Enqueue(bq.q, time.Now(), []jobstate.NewJob{{ID: fmt.Sprintf("j%d", bq.n), Type: "t"}})
		require.NoError(bq.t, b.Exec(ctx))
		rows, err := p.Result()
		require.NoError(bq.t, err)
		require.Equal(bq.t, script.OK, rows[0].Code)
	}
	res, err := bq.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "c",
		Streams: []string{bq.q.Stream(), ">"}, Count: int64(n)}).Result()
	require.NoError(bq.t, err)
	var jobs []jobstate.AdmitItem
	for _, m := range res[0].Messages {
		jobs = append(jobs, jobstate.AdmitItem{ID: m.Values[keys.EntryUUID].(string), Entry: m.ID, Type: "t", Attempt: 1})
	}
	require.Len(bq.t, jobs, n)
	return jobs
}

func (bq *bookQueue) admit(jobs []jobstate.AdmitItem) ([]AdmitOutcome, []*Grant) {
	bq.t.Helper()
	ql := bq.book.Queue(&bq.q)
	require.NotNil(bq.t, ql)
	return bq.book.Admit(bq.t.Context(), ql, &bq.q, jobs)
}

// takeNow is take for a job of type t under bq's limits, as admit tries it first.
func (bq *bookQueue) takeNow() *Grant {
	b := bq.book
	b.mu.Lock()
	defer b.mu.Unlock()
	ql := b.queues[bq.q.Stream()]
	return b.take(ql, ql.scopesOf("t", ""), time.Now())
}

// waitRunOut waits until holder's lease has run out by Redis's clock.
func (bq *bookQueue) waitRunOut(holder string) {
	bq.t.Helper()
	hz := bq.q.LimitPrefix() + "hz:"
	require.Eventually(bq.t, func() bool {
		score, err := bq.rdb.ZScore(bq.t.Context(), hz, holder).Result()
		now, terr := bq.rdb.Time(bq.t.Context()).Result()
		return err == nil && terr == nil && score < float64(now.UnixMilli())
	}, 5*time.Second, time.Millisecond)
}

// A worker whose lease ran out while a job ran, and another took its slot: neither the
// keeper's answer (lost) nor the job's end may leave the worker believing it holds a slot
// Redis no longer counts as its own, or a next job would run beside the other worker's under
// a limit of 1.
func TestLeaseLostSlotIsNotHandedOutAgain(t *testing.T) {
	t.Parallel()
	bq := newBookQueue(t, "a/1", time.Millisecond, jobstate.Limit{Concurrency: 1})
	outs, grants := bq.admit(bq.read(1))
	require.Equal(t, []AdmitOutcome{AdmitGranted}, outs)
	bq.waitRunOut("a/1")
	// Another holder takes the slot back and runs a job on it.
	other := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	res, err := jobstate.NewStore(bq.rdb, "").Admit(t.Context(), jobstate.AdmitParams{Queue: &bq.q, Holder: other, Reqs: []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}})
	require.NoError(t, err)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 1}}, res.Grants)

	bq.book.lease = time.Minute
	bq.book.keep(t.Context(), false) // told: lost
	grants[0].GiveBack()             // the job that ran on the lost slot ends
	require.Nil(t, bq.takeNow(), "a slot Redis counts as b's is handed out again")
}

// While jobs wait in Redis for a slot of an instance, a job the worker reads is not admitted
// from its spare slots in memory: it goes to admit.lua, whose answer tells the worker whether
// jobs still wait, so that the spare slots go back to them (LeaseBook.take).
func TestLeaseTakeLeavesJobsToRedisWhileJobsWait(t *testing.T) {
	t.Parallel()
	bq := newBookQueue(t, "a/1", time.Minute, jobstate.Limit{Concurrency: 2})
	outs, _ := bq.admit(bq.read(1)) // leases both slots: one runs the job, one is spare
	require.Equal(t, []AdmitOutcome{AdmitGranted}, outs)
	// Another worker's job waits for a slot, and the keeper learns it.
	other := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	items := []jobstate.AdmitItem{bq.read(1)[0]}
	res, err := jobstate.NewStore(bq.rdb, "").Admit(t.Context(), jobstate.AdmitParams{Queue: &bq.q, Holder: other, Reqs: []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, Items: items})
	require.NoError(t, err)
	require.Equal(t, script.Deferred, res.Jobs[0].Code)
	bq.book.mu.Lock()
	for _, il := range bq.book.queues[bq.q.Stream()].insts {
		il.used = time.Now() // not idle: the keeper keeps the spare slot this once
	}
	bq.book.mu.Unlock()
	bq.book.keep(t.Context(), false)
	require.Nil(t, bq.takeNow(), "jobs wait in Redis: the worker asks")
}

// Rate tokens leased ahead of the reads admit jobs in memory for TokenLife only (the rate
// counts each from then, the latest its job may start); older ones go back by the keeper,
// out of the rate's log by their grant's stamp, for another worker to take.
func TestLeaseTokensLiveTokenLife(t *testing.T) {
	t.Parallel()
	bq := newBookQueue(t, "a/1", time.Minute, jobstate.Limit{Rate: 10, Interval: time.Hour})
	outs, _ := bq.admit(bq.read(1)) // leases the whole rate: 1 for the job, 9 ahead
	require.Equal(t, []AdmitOutcome{AdmitGranted}, outs)
	require.NotNil(t, bq.takeNow(), "a fresh token admits a job in memory")
	bq.book.mu.Lock()
	for _, il := range bq.book.queues[bq.q.Stream()].insts {
		require.Equal(t, 8, tokenCount(il.tokens))
		for k := range il.tokens {
			il.tokens[k].at = il.tokens[k].at.Add(-2 * TokenLife) // as if leased a while ago
		}
	}
	bq.book.mu.Unlock()
	require.Nil(t, bq.takeNow(), "a token older than TokenLife admits nothing")
	bq.book.keep(t.Context(), false)
	other := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	res, err := jobstate.NewStore(bq.rdb, "").Admit(t.Context(), jobstate.AdmitParams{Queue: &bq.q, Holder: other, Reqs: []jobstate.LeaseRequest{{Inst: "q", Tokens: 10}}})
	require.NoError(t, err)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 8}}, res.Grants, "the 8 unused tokens went back")
}

// heldCall holds back the calls sent with its context mark until released, so that a test
// can have Redis run another call first: the order two goroutines' calls reach Redis in is
// otherwise up to the scheduler.
type heldCall struct {
	sent    chan struct{} // closed when a marked call is about to be sent
	release chan struct{}
	once    sync.Once
}

type heldCallKey struct{}

func holdCalls(rdb *redis.Client) *heldCall {
	h := &heldCall{sent: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	return h
}

func (h *heldCall) mark(ctx context.Context) context.Context {
	return context.WithValue(ctx, heldCallKey{}, true)
}

func (h *heldCall) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldCall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *heldCall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(heldCallKey{}) != nil {
			h.once.Do(func() { close(h.sent) })
			<-h.release
		}
		return next(ctx, cmd)
	}
}

// The keeper gives an idle instance's spare slots back and forgets the instance in one call;
// a job read meanwhile makes the instance anew. Its slot numbers must not be the ones on
// their way back: admit.lua, run first, grants such a name (it is in the slot set already),
// the give-back then takes it out of the set while the job runs on it, and another worker
// takes the room: four jobs ran under a limit of 3 (TestFlowLimitsE2E/GlobalConcurrency,
// about 1 run in 10 on a loaded machine, with the slot set never above 3).
func TestLeaseForgottenInstanceNumbersNotAskedAgain(t *testing.T) {
	t.Parallel()
	const limit = 3
	bq := newBookQueue(t, "a/1", time.Minute, jobstate.Limit{Concurrency: limit})
	rdb, ok := bq.rdb.(*redis.Client)
	require.True(t, ok)
	held := holdCalls(rdb)
	outs, grants := bq.admit(bq.read(1)) // a block of 2 slots: one runs the job, one is spare
	require.Equal(t, []AdmitOutcome{AdmitGranted}, outs)
	grants[0].GiveBack()
	bq.book.mu.Lock()
	for _, il := range bq.book.queues[bq.q.Stream()].insts {
		il.used = time.Now().Add(-2 * leaseIdle) // idle: given back and forgotten
	}
	bq.book.mu.Unlock()

	kept := make(chan struct{})
	go func() {
		defer close(kept)
		bq.book.keep(held.mark(t.Context()), false)
	}()
	<-held.sent // the give-back is on its way: the instance is forgotten in memory
	outs, grants = bq.admit(bq.read(1))
	close(held.release)
	<-kept
	require.Equal(t, []AdmitOutcome{AdmitGranted}, outs)

	set := bq.q.LimitPrefix() + "c:q"
	names, err := bq.rdb.SMembers(t.Context(), set).Result()
	require.NoError(t, err)
	for _, s := range grants[0].slots {
		require.Contains(t, names, fmt.Sprintf("a/1#%d", s.n), "the running job's slot is counted in Redis")
	}
	// Another worker takes what room Redis sees: together no more than the limit run.
	other := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	res, err := jobstate.NewStore(bq.rdb, "").Admit(t.Context(), jobstate.AdmitParams{Queue: &bq.q, Holder: other, Reqs: []jobstate.LeaseRequest{{Inst: "q", Names: []int{0, 1, 2}}}})
	require.NoError(t, err)
	require.LessOrEqual(t, len(grants[0].slots)+res.Grants[0].Names, limit, "slots running jobs at once")
}
