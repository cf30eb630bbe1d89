package jobstate_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// leaseQueue is a queue with limits and jobs read by a consumer, for admit.lua and leases.lua.
type leaseQueue struct {
	t   *testing.T
	rdb redis.UniversalClient
	q   keys.Queue
}

func newLeaseQueue(t *testing.T, limits ...jobstate.Limit) *leaseQueue {
	t.Helper()
	lq := &leaseQueue{t: t, rdb: redistest.Client(t), q: keys.New(keys.DefaultPrefix, redistest.UniqueName(t))}
	ctx := t.Context()
	require.NoError(t, lq.rdb.XGroupCreateMkStream(ctx, lq.q.Stream(), keys.Group, "0").Err())
	for _, l := range limits {
		require.NoError(t, jobstate.SetLimit(ctx, lq.rdb, lq.q, l, time.Now()))
	}
	return lq
}

// read publishes jobs with ids (limit key key) and reads them as consumer c: the items to admit.
func (lq *leaseQueue) read(key string, ids ...string) []jobstate.AdmitItem {
	lq.t.Helper()
	ctx := lq.t.Context()
	now := time.Now()
	jobs := make([]jobstate.NewJob, len(ids))
	for k, id := range ids {
		jobs[k] = jobstate.NewJob{ID: id, Type: "t", RunAt: now, ChosenID: true, LimitKey: key}
	}
	c := jobstate.EnqueueCall(lq.q, now, jobs)
	_, err := jobstate.EnqueueReply(c.Script.Run(ctx, lq.rdb, c.Keys, c.Args...), len(jobs))
	require.NoError(lq.t, err)
	res, err := lq.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "c",
		Streams: []string{lq.q.Stream(), ">"}, Count: int64(len(ids))}).Result()
	require.NoError(lq.t, err)
	items := make([]jobstate.AdmitItem, 0, len(ids))
	for _, m := range res[0].Messages {
		k, _ := m.Values[keys.EntryLimitKey].(string)
		require.Equal(lq.t, key, k, "the entry carries the limit key")
		items = append(items, jobstate.AdmitItem{ID: m.Values[keys.EntryUUID].(string), Entry: m.ID, Type: "t",
			Attempt: 1, LimitKey: k})
	}
	return items
}

func (lq *leaseQueue) admit(h jobstate.Holder, reqs []jobstate.LeaseRequest, items []jobstate.AdmitItem) jobstate.AdmitResult {
	lq.t.Helper()
	c := jobstate.AdmitCall(&lq.q, h, reqs, items)
	res, err := jobstate.AdmitReply(c.Script.Run(lq.t.Context(), lq.rdb, c.Keys, c.Args...), len(reqs), len(items))
	require.NoError(lq.t, err)
	return res
}

func (lq *leaseQueue) keep(h jobstate.Holder, end bool, rets ...jobstate.LeaseReturn) (lost bool, waiting []string) {
	lq.t.Helper()
	c := jobstate.LeasesCall(&lq.q, h, end, rets)
	lost, waiting, err := jobstate.LeasesReply(c.Script.Run(lq.t.Context(), lq.rdb, c.Keys, c.Args...))
	require.NoError(lq.t, err)
	return lost, waiting
}

func (lq *leaseQueue) taken(inst string) int64 {
	lq.t.Helper()
	n, err := lq.rdb.SCard(lq.t.Context(), lq.q.LimitPrefix()+"c:"+inst).Result()
	require.NoError(lq.t, err)
	return n
}

func (lq *leaseQueue) status(id string) string {
	lq.t.Helper()
	return lq.rdb.HGet(lq.t.Context(), lq.q.Job(id), keys.FieldStatus).Val()
}

// A lease grants slot numbers by name, up to the limit, in the order asked; asking for the
// same names again (a call repeated after a lost reply) counts nothing twice; jobs are granted
// from what the call set aside and granted, and the rest wait for a slot.
func TestLeaseGrantsByName(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 2})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0, 1, 2}}}, nil)
	require.False(t, res.Lost)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 2}}, res.Grants)
	require.EqualValues(t, 2, lq.taken("q"))
	a.Known = true
	res = lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0, 1}}}, nil)
	require.EqualValues(t, 2, lq.taken("q"), "the same names again take nothing more")

	// Two jobs on the two slots the worker holds, a third over the limit: it waits.
	items := lq.read("", "j1", "j2", "j3")
	res = lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", SlotsAside: 2, Names: []int{2}}}, items)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 0, Waiting: true}}, res.Grants)
	require.Equal(t, []script.Code{script.OK, script.OK, script.Deferred}, codes(res.Jobs))
	require.True(t, res.Jobs[2].Due.IsZero(), "waiting for a slot, not for a time")
	require.Equal(t, "scheduled", lq.status("j3"))
	require.Equal(t, "queued", lq.status("j1"), "a granted job's hash is not touched")
	// The holder learns that a job waits, and giving a slot back wakes it into the stream.
	_, waiting := lq.keep(a, false)
	require.Equal(t, []string{"q"}, waiting)
	lq.keep(a, false, jobstate.LeaseReturn{Inst: "q", Names: []int{1}})
	require.EqualValues(t, 1, lq.taken("q"))
	require.Equal(t, "queued", lq.status("j3"))
	_, waiting = lq.keep(a, false)
	require.Empty(t, waiting)
}

func codes(as []jobstate.Admission) []script.Code {
	out := make([]script.Code, len(as))
	for k, a := range as {
		out[k] = a.Code
	}
	return out
}

// A holder whose lease ran out (a dead worker) loses its slots to the next call that needs
// them, which takes them back and grants them; the holder, if it comes back, is told.
func TestLeaseOfADeadHolderIsTakenBack(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 1}, jobstate.Limit{PerKey: true, Concurrency: 1})
	dead := jobstate.Holder{Name: "dead/1", Lease: time.Millisecond}
	res := lq.admit(dead, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}, {Inst: "qk:k", Names: []int{0}}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 1}, {Names: 1}}, res.Grants)
	// Its lease runs out by Redis's clock.
	hz := lq.q.LimitPrefix() + "hz:"
	require.Eventually(t, func() bool {
		score := lq.rdb.ZScore(t.Context(), hz, dead.Name).Val()
		now, err := lq.rdb.Time(t.Context()).Result()
		return err == nil && score < float64(now.UnixMilli())
	}, 5*time.Second, time.Millisecond)

	live := jobstate.Holder{Name: "live/1", Lease: time.Minute}
	items := lq.read("k", "j1")
	res = lq.admit(live, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}, {Inst: "qk:k", Names: []int{0}}}, items)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 1}, {Names: 1}}, res.Grants, "the dead holder's slots taken back")
	require.Equal(t, []script.Code{script.OK}, codes(res.Jobs))
	members := lq.rdb.SMembers(t.Context(), lq.q.LimitPrefix()+"c:qk:k").Val()
	require.Equal(t, []string{"live/1#0"}, members)
	require.Zero(t, lq.rdb.Exists(t.Context(), lq.q.LimitPrefix()+"hs:"+dead.Name).Val())

	dead.Known = true
	lost, _ := lq.keep(dead, false)
	require.True(t, lost, "a holder whose lease was taken back is told")
}

// Rate tokens are leased as far as the rate allows; a job the tokens do not cover is deferred
// to when the rate frees; tokens given back (by the stamp of their grant) make room again.
func TestLeaseTokens(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Rate: 5, Interval: time.Hour})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 8}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 5}}, res.Grants, "a burst of the rate")
	stamp := res.Stamp
	a.Known = true
	b := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	items := lq.read("", "j1")
	res = lq.admit(b, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, items)
	require.Equal(t, []jobstate.LeaseGrant{{}}, res.Grants)
	require.Equal(t, []script.Code{script.Deferred}, codes(res.Jobs))
	require.WithinDuration(t, time.Now().Add(time.Hour), res.Jobs[0].Due, time.Minute,
		"due when the rate frees: when the five are an interval old")
	lq.keep(a, false, jobstate.LeaseReturn{Inst: "q", Tokens: []jobstate.TokenReturn{{Stamp: stamp, N: 3}}})
	res = lq.admit(b, []jobstate.LeaseRequest{{Inst: "q", Tokens: 5}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 3}}, res.Grants, "the three given back")
}

// A holder that ends gives back every slot it holds, in every instance, and its lease record
// goes.
func TestLeaseEnd(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 5}, jobstate.Limit{Type: "t", Concurrency: 5})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0, 1, 2}}, {Inst: "t:t", Names: []int{0, 1}}}, nil)
	require.EqualValues(t, 3, lq.taken("q"))
	require.EqualValues(t, 2, lq.taken("t:t"))
	a.Known = true
	lost, _ := lq.keep(a, true)
	require.False(t, lost)
	require.Zero(t, lq.taken("q"))
	require.Zero(t, lq.taken("t:t"))
	ctx := context.Background()
	require.Zero(t, lq.rdb.Exists(ctx, lq.q.LimitPrefix()+"hs:"+a.Name, lq.q.LimitPrefix()+"hz:").Val())
}

// A job admitted before leases names its slots in its hash ('limit_slots', the job's id in the
// slot set): releasing it (a worker of an older version putting it back) still gives them back
// and wakes the job waiting for one.
func TestReleaseGivesBackSlotsOfJobsAdmittedBeforeLeases(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 1})
	ctx := t.Context()
	items := lq.read("", "old", "waiting")
	lp := lq.q.LimitPrefix()
	require.NoError(t, lq.rdb.SAdd(ctx, lp+"c:q", "old").Err())
	require.NoError(t, lq.rdb.HSet(ctx, lq.q.Job("old"), keys.FieldLimitSlots, lp+"\nq").Err())
	// The second job waits for the slot the old one holds.
	res := lq.admit(jobstate.Holder{Name: "a/1", Lease: time.Minute}, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, items[1:])
	require.Equal(t, []script.Code{script.Deferred}, codes(res.Jobs))
	_, err := jobstate.NewStore(lq.rdb, "").Release(ctx, lq.q, jobstate.ReleaseParams{Now: time.Now(), Entries: []string{items[0].Entry}})
	require.NoError(t, err)
	require.Zero(t, lq.taken("q"))
	require.Empty(t, lq.rdb.HGet(ctx, lq.q.Job("old"), keys.FieldLimitSlots).Val())
	require.Equal(t, "queued", lq.status("waiting"), "woken by the slot given back")
}

// A holder done with an instance leaves its lease record (so that the record does not grow
// with every limit key a worker saw), unless one of its names is still there.
func TestLeaseForget(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{PerKey: true, Concurrency: 5})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	lq.admit(a, []jobstate.LeaseRequest{{Inst: "qk:x", Names: []int{0, 1}}, {Inst: "qk:y", Names: []int{0}}}, nil)
	a.Known = true
	hs := lq.q.LimitPrefix() + "hs:" + a.Name
	require.ElementsMatch(t, []string{"qk:x", "qk:y"}, lq.rdb.SMembers(t.Context(), hs).Val())
	// x: one name given back, the other still held: it stays. y: all back: it goes.
	lq.keep(a, false, jobstate.LeaseReturn{Inst: "qk:x", Names: []int{0}, Forget: true},
		jobstate.LeaseReturn{Inst: "qk:y", Names: []int{0}, Forget: true})
	require.Equal(t, []string{"qk:x"}, lq.rdb.SMembers(t.Context(), hs).Val())
	require.EqualValues(t, 1, lq.taken("qk:x"))
	require.Zero(t, lq.taken("qk:y"))
}

// runOut waits until holder's lease has run out by Redis's clock.
func (lq *leaseQueue) runOut(holder string) {
	lq.t.Helper()
	hz := lq.q.LimitPrefix() + "hz:"
	require.Eventually(lq.t, func() bool {
		score, err := lq.rdb.ZScore(lq.t.Context(), hz, holder).Result()
		if err == redis.Nil {
			return true
		}
		now, terr := lq.rdb.Time(lq.t.Context()).Result()
		return err == nil && terr == nil && score < float64(now.UnixMilli())
	}, 5*time.Second, time.Millisecond)
}

func (lq *leaseQueue) dueOf(id string) float64 {
	lq.t.Helper()
	s, err := lq.rdb.ZScore(lq.t.Context(), lq.q.Scheduled(), id).Result()
	require.NoError(lq.t, err, "job %s is in the scheduled set", id)
	return s
}

// A holder whose lease ran out, and whose slot another holder took since, comes back with a
// job and the slot (and token) it had set aside: what it set aside went with its lease, so
// the job is deferred, never run beside the other holder's under a limit of 1.
func TestLeaseLostHolderSetsNothingAside(t *testing.T) {
	t.Parallel()
	t.Run("slot", func(t *testing.T) {
		t.Parallel()
		lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 1})
		a := jobstate.Holder{Name: "a/1", Lease: time.Millisecond}
		res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, nil)
		require.Equal(t, []jobstate.LeaseGrant{{Names: 1}}, res.Grants)
		lq.runOut(a.Name)
		b := jobstate.Holder{Name: "b/1", Lease: time.Minute}
		res = lq.admit(b, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, nil)
		require.Equal(t, []jobstate.LeaseGrant{{Names: 1}}, res.Grants, "a's slot taken back and granted to b")

		a.Known, a.Lease = true, time.Minute
		items := lq.read("", "j1")
		res = lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", SlotsAside: 1}}, items)
		require.True(t, res.Lost)
		require.Equal(t, []script.Code{script.Deferred}, codes(res.Jobs), "the slot a set aside is b's now")
		require.EqualValues(t, 1, lq.taken("q"))
	})
	t.Run("token", func(t *testing.T) {
		t.Parallel()
		lq := newLeaseQueue(t, jobstate.Limit{Rate: 1, Interval: time.Hour})
		a := jobstate.Holder{Name: "a/1", Lease: time.Millisecond}
		res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, nil)
		require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants)
		lq.runOut(a.Name)
		a.Known, a.Lease = true, time.Minute
		items := lq.read("", "j1")
		res = lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", TokensAside: 1}}, items)
		require.True(t, res.Lost)
		require.Equal(t, []script.Code{script.Deferred}, codes(res.Jobs), "the token a set aside went with its lease")
	})
}

// A holder whose lease ran out and that calls the keeper before anyone took its slots back
// has them taken back by that call: it is told its lease was lost and forgets them, so they
// must not stay taken (renewing its lease first would hide them from every reaper).
func TestLeaseRunOutHolderIsTakenBackByItsOwnKeeper(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 1})
	a := jobstate.Holder{Name: "a/1", Lease: time.Millisecond}
	lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, nil)
	require.EqualValues(t, 1, lq.taken("q"))
	lq.runOut(a.Name)
	a.Known, a.Lease = true, time.Minute
	lost, _ := lq.keep(a, false)
	require.True(t, lost)
	require.Zero(t, lq.taken("q"), "the slot a forgot is free")
}

// Any holder's keeper call takes back the slots of a holder whose lease ran out (a dead
// worker) and wakes the jobs waiting for them: with no job read, nothing else would.
func TestLeaseKeeperTakesBackDeadHolders(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 1})
	dead := jobstate.Holder{Name: "dead/1", Lease: time.Millisecond}
	items := lq.read("", "j1", "j2")
	res := lq.admit(dead, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, items)
	require.Equal(t, []script.Code{script.OK, script.Deferred}, codes(res.Jobs))
	lq.runOut(dead.Name)

	live := jobstate.Holder{Name: "live/1", Lease: time.Minute}
	lost, _ := lq.keep(live, false)
	require.True(t, lost, "live had no lease yet")
	require.Zero(t, lq.taken("q"), "the dead holder's slot is back")
	require.Equal(t, "queued", lq.status("j2"), "and the job waiting for it woken")
}

// Slots given back together wake a waiting job each, not one in all.
func TestLeaseGiveBackWakesAJobPerSlot(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 2})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	items := lq.read("", "j1", "j2", "j3", "j4")
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0, 1}}}, items)
	require.Equal(t, []script.Code{script.OK, script.OK, script.Deferred, script.Deferred}, codes(res.Jobs))
	a.Known = true
	lq.keep(a, false, jobstate.LeaseReturn{Inst: "q", Names: []int{0, 1}})
	require.Zero(t, lq.taken("q"))
	require.Equal(t, "queued", lq.status("j3"))
	require.Equal(t, "queued", lq.status("j4"))
}

// Room in an instance while jobs wait for it (its limit raised behind limitset.lua's back: an
// operator's HSET, a restored hash) wakes them at the next call that asks for its slots.
func TestLeaseRoomLeftWakesWaitingJobs(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 1})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	items := lq.read("", "j1", "j2")
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, items)
	require.Equal(t, []script.Code{script.OK, script.Deferred}, codes(res.Jobs))
	f, v := jobstate.EncodeLimit(jobstate.Limit{Concurrency: 3})
	require.NoError(t, lq.rdb.HSet(t.Context(), lq.q.Limits(), f, v).Err())
	b := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	res = lq.admit(b, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 1}}, res.Grants)
	require.Equal(t, "queued", lq.status("j2"), "woken into the room left")
}

// Jobs a rate defers in one call are due T apart (T = interval / rate), each T after the
// previous, by the due times Redis stored in the scheduled set: without the horizon they
// would all be due at the moment the rate first frees, to be deferred again together.
func TestLeaseRateDefersEachTAfterThePrevious(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Rate: 2, Interval: time.Hour})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	items := lq.read("", "j1", "j2", "j3", "j4", "j5")
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 2}}, items)
	require.Equal(t, []script.Code{script.OK, script.OK, script.Deferred, script.Deferred, script.Deferred}, codes(res.Jobs))
	T := float64((30 * time.Minute).Milliseconds())
	for _, id := range []string{"j4", "j5"} {
		prev := map[string]string{"j4": "j3", "j5": "j4"}[id]
		require.Equal(t, T, lq.dueOf(id)-lq.dueOf(prev), "%s due T after %s", id, prev)
	}
}

// A job a rate defers that is now the earliest in the scheduled set tells the sleeping
// schedulers on the wake channel, or it would wait out their longest sleep.
func TestLeaseRateDeferralWakesTheScheduler(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Rate: 1, Interval: time.Second})
	sub := lq.rdb.Subscribe(t.Context(), lq.q.Wake())
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(t.Context()) // subscribed
	require.NoError(t, err)
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	items := lq.read("", "j1", "j2")
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, items)
	require.Equal(t, []script.Code{script.OK, script.Deferred}, codes(res.Jobs))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	m, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err, "no wake message")
	require.Equal(t, strconv.FormatInt(res.Jobs[1].Due.UnixMilli(), 10), m.Payload)
}

// Raising a per-key limit (of the queue's keys, or of a type's) wakes every job waiting for a
// slot of any of its keys' instances.
func TestLimitSetWakesPerKeyWaiters(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"", "t"} {
		t.Run("type="+typ, func(t *testing.T) {
			t.Parallel()
			lq := newLeaseQueue(t, jobstate.Limit{Type: typ, PerKey: true, Concurrency: 1})
			inst := jobstate.LimitInstance(jobstate.LimitField(typ, true), "t", "k")
			a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
			items := lq.read("k", "j1", "j2", "j3")
			res := lq.admit(a, []jobstate.LeaseRequest{{Inst: inst, Names: []int{0}}}, items)
			require.Equal(t, []script.Code{script.OK, script.Deferred, script.Deferred}, codes(res.Jobs))
			require.NoError(t, jobstate.SetLimit(t.Context(), lq.rdb, lq.q,
				jobstate.Limit{Type: typ, PerKey: true, Concurrency: 3}, time.Now()))
			require.Equal(t, "queued", lq.status("j2"))
			require.Equal(t, "queued", lq.status("j3"), "every waiting job woken")
		})
	}
}

// A rate of N per interval admits at most N in any window of the interval, by Redis's clock:
// a burst of N, then the next once the first of them is an interval old (GCRA with a burst of
// N let 2N - 1 start within one interval: N at once, then one every interval/N). Holders ask
// for a token at a time, as fast as they can, for more than two intervals; each grant's time is
// its stamp, the Redis time the call counted it at (TokenLife 0: the call's own).
func TestLeaseRateAtMostNInAnyInterval(t *testing.T) {
	t.Parallel()
	const rate, interval = 5, 200 * time.Millisecond
	lq := newLeaseQueue(t, jobstate.Limit{Rate: rate, Interval: interval})
	ctx := t.Context()
	holders := []jobstate.Holder{{Name: "a/1", Lease: time.Minute}, {Name: "b/1", Lease: time.Minute}}
	var granted []time.Time
	var first time.Time
	for k := 0; ; k++ {
		h := &holders[k%2]
		c := jobstate.AdmitCall(&lq.q, *h, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, nil)
		var cmd *redis.Cmd
		var at *redis.TimeCmd
		_, err := lq.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = c.Script.For(lq.rdb).Eval(ctx, p, c.Keys, c.Args...)
			at = p.Time(ctx)
			return nil
		})
		require.NoError(t, err)
		res, err := jobstate.AdmitReply(cmd, 1, 0)
		require.NoError(t, err)
		h.Known = true
		now := at.Val()
		if first.IsZero() {
			first = now
		}
		if res.Grants[0].Tokens == 1 {
			granted = append(granted, stampTime(t, res.Stamp))
		}
		// Until both: more than two intervals and 2N grants, the rate used in full at least
		// twice (before, only the two intervals and a half, in which a loaded machine's slow
		// calls did not always reach 2N). 10x: the 2N take about 0.2 s here.
		if now.Sub(first) > 2*interval+interval/2 && len(granted) >= 2*rate {
			break
		}
		require.Less(t, now.Sub(first), time.Minute, "the rate was not used: %v", granted)
		time.Sleep(time.Millisecond)
	}
	for i := range granted {
		n := 0
		for _, g := range granted[i:] {
			if g.Sub(granted[i]) < interval {
				n++
			}
		}
		require.LessOrEqual(t, n, rate, "grants within %v of the one at %d: %v", interval, i, granted)
	}
}

// A rate's log keeps at most 32 entries however many calls granted tokens: merging two keeps
// their count (a later time, which can only hold the rate back), and a token given back by its
// grant's stamp is found after its entry was merged.
func TestLeaseRateLogBounded(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Rate: 100, Interval: time.Hour})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	var first string
	for k := range 40 {
		res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, nil)
		require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants)
		if k == 0 {
			first = res.Stamp
		}
		a.Known = true
	}
	v, err := lq.rdb.Get(t.Context(), lq.q.LimitPrefix()+"rl:q").Result()
	require.NoError(t, err)
	require.LessOrEqual(t, len(strings.Fields(v)), 2*32, "the log: %s", v)
	lq.keep(a, false, jobstate.LeaseReturn{Inst: "q", Tokens: []jobstate.TokenReturn{{Stamp: first, N: 1}}})
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 100}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 61}}, res.Grants, "40 granted, 1 given back")
}

// A rate counts a token its call's job took from the call (the job starts now), and one left to
// the holder from the latest its job may start (the holder's TokenLife on), so that the bound
// holds for starts: the rate frees an interval after that.
func TestLeaseRateCountsLeftTokensFromTheirLatestStart(t *testing.T) {
	t.Parallel()
	for _, withJob := range []bool{true, false} {
		t.Run(map[bool]string{true: "taken", false: "left"}[withJob], func(t *testing.T) {
			t.Parallel()
			lq := newLeaseQueue(t, jobstate.Limit{Rate: 1, Interval: time.Hour})
			a := jobstate.Holder{Name: "a/1", Lease: time.Minute, TokenLife: 10 * time.Minute}
			var items []jobstate.AdmitItem
			if withJob {
				items = lq.read("", "j1")
			}
			res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, items)
			require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants)
			b := jobstate.Holder{Name: "b/1", Lease: time.Minute}
			res = lq.admit(b, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, lq.read("", "j2"))
			require.Equal(t, []script.Code{script.Deferred}, codes(res.Jobs))
			want := time.Now().Add(time.Hour)
			if !withJob {
				want = want.Add(10 * time.Minute)
			}
			require.WithinDuration(t, want, res.Jobs[0].Due, time.Minute)
		})
	}
}

// stampTime is a grant's stamp as a time.
func stampTime(t *testing.T, stamp string) time.Time {
	t.Helper()
	us, err := strconv.ParseInt(stamp, 10, 64)
	require.NoError(t, err)
	return time.UnixMicro(us)
}

// waitRedisTime waits until Redis's clock reaches at: Redis's clock runs whatever the load, so
// the wait is the time until at, and 10x: the 30 s more a stalled poll may take.
func (lq *leaseQueue) waitRedisTime(at time.Time) {
	lq.t.Helper()
	require.Eventually(lq.t, func() bool {
		now, err := lq.rdb.Time(lq.t.Context()).Result()
		return err == nil && !now.Before(at)
	}, time.Until(at)+30*time.Second, time.Millisecond)
}

// A grant an interval old no longer counts, while the log lives on with newer ones.
func TestLeaseRateForgetsGrantsAnIntervalOld(t *testing.T) {
	t.Parallel()
	// The third call must run after the first grant is an interval old and before the second
	// is. 10x: that window is half the interval, 2.5 s, where a quarter of 1 s (250 ms) was
	// overrun on a loaded machine by the time between the wait's end and the call.
	const interval = 5 * time.Second
	lq := newLeaseQueue(t, jobstate.Limit{Rate: 2, Interval: interval})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants)
	first := stampTime(t, res.Stamp)
	a.Known = true
	lq.waitRedisTime(first.Add(interval / 2))
	res = lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants)
	second := stampTime(t, res.Stamp)
	if second.Sub(first) >= interval {
		t.Skip("the machine was too slow to grant the second token within the interval")
	}
	lq.waitRedisTime(first.Add(interval + time.Millisecond))
	res = lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 2}}, nil)
	if stampTime(t, res.Stamp).Sub(second) >= interval {
		// By the call's own stamp, not a margin: both grants were an interval old.
		t.Skip("the machine was too slow to call again within the second grant's interval")
	}
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants, "the first grant is an interval old")
}

// A token goes back out of its own grant's entry, not an older holder's: the rate then frees
// an interval after the grants that stay.
func TestLeaseRateGivesBackByStamp(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Rate: 2, Interval: time.Hour})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	b := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants)
	kept := stampTime(t, res.Stamp)
	lq.waitRedisTime(kept.Add(50 * time.Millisecond))
	res = lq.admit(b, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, nil)
	require.Equal(t, []jobstate.LeaseGrant{{Tokens: 1}}, res.Grants)
	b.Known = true
	lq.keep(b, false, jobstate.LeaseReturn{Inst: "q", Tokens: []jobstate.TokenReturn{{Stamp: res.Stamp, N: 1}}})
	res = lq.admit(b, []jobstate.LeaseRequest{{Inst: "q", Tokens: 1}}, lq.read("", "j1", "j2"))
	require.Equal(t, []script.Code{script.OK, script.Deferred}, codes(res.Jobs))
	due := kept.Add(time.Hour)
	require.Equal(t, (due.UnixMicro()+999)/1000, res.Jobs[1].Due.UnixMilli(),
		"due an interval after a's grant, the older of the two that count")
}
