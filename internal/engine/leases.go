package engine

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/service"
)

// Admission holds every job of a queue with limits to them before its handler runs. It works
// from leases. Each worker session is a holder (jobstate.Holder). It leases concurrency slots
// and rate tokens from Redis in blocks (admit.lua), and admits the jobs it reads from them in
// memory. A job takes a slot of each of its concurrency limits and a token of each of its
// rates. Its slots come back to the worker when its handler returns, to run the next job.
//
// So a limit that is not limiting costs no Redis call per job or per read, only one per lease.
// Admitting in a script per read batch cost a limited drain a quarter of the plain one's
// throughput. Most of that was the round trip before a batch could start (docs/BENCHMARKS.md,
// "Issue 18, third round: leases").
//
// What a worker's leases cannot cover goes to admit.lua, in one call per read batch
// (Loop.admitRead, the subscriber's Config.Prepare). The script leases more: what the
// batch lacks and as much again, so the next batches run from memory. It defers the jobs it still cannot
// admit. A deferred job is scheduled again; it is not failed and costs no attempt.
//
// Spare slots and tokens go back to Redis in bulk (leases.lua, from the lease keeper). Slots
// go back when unused for leaseIdle. Tokens go back when unused for TokenLife, since a token
// is a start granted now, not later. Every spare slot of an instance that jobs wait for goes
// back at once. A worker takes no more of it without asking. So slots do not idle in one
// worker while jobs wait in Redis.
//
// A worker's leases live while it renews them (every keeperTick while it holds any, within
// VisibilityTimeout). A worker that dies, or is cut off from Redis for longer, loses them
// (cv_reap_holders). Its jobs come back through recovery, as before.
//
// A Grant whose reply is lost is harmless. The keeper gives back the slot numbers asked for.
// The tokens are lost, which can only slow a rate. The middleware (Loop.admit) asks about the jobs
// again, fenced. A job that the lost call deferred has moved on and is refused.
const (
	keeperTick = 100 * time.Millisecond
	leaseProbe = time.Second
	leaseIdle  = 250 * time.Millisecond
	// TokenLife is how long a worker keeps a leased rate token before it gives it back.
	TokenLife = 100 * time.Millisecond
)

// admittedKey keys the context value of a message whose job was admitted: its Grant.
type admittedKey struct{}

// WithGrant returns ctx carrying g, the slots of the job admitted on it.
func WithGrant(ctx context.Context, g *Grant) context.Context {
	return context.WithValue(ctx, admittedKey{}, g)
}

// Grant is what one admitted job holds: a slot of each of its concurrency instances. The
// slots belong to lease generation gen of its queue; a lost lease's slots are not given back.
type Grant struct {
	book  *LeaseBook
	ql    *QueueLease
	gen   int
	slots []heldSlot
}

type heldSlot struct {
	il *instLease
	n  int
}

// GrantOf returns the Grant on ctx, or nil.
func GrantOf(ctx context.Context) *Grant {
	g, _ := ctx.Value(admittedKey{}).(*Grant)
	return g
}

// LeaseBook is one worker session's leases, per queue.
type LeaseBook struct {
	store  jobstate.Backend
	log    zerolog.Logger
	holder string
	lease  time.Duration
	conc   int // the worker's concurrency: no instance is leased more slots than that
	batch  int // the worker's read batch

	mu     sync.Mutex
	queues map[string]*QueueLease // by the queue's level-1 stream key
	fresh  int                    // the next slot number never asked for (number)
	kick   chan struct{}
	loop   service.Loop
}

// QueueLease is a session's lease of one queue's limits.
type QueueLease struct {
	q      keys.Queue // level 1
	limits map[string]jobstate.Limit
	insts  map[string]*instLease
	scopes map[string]map[string][]scope // by type, then limit key: made once each
	known  bool                          // a call of the holder went through (admit.lua's lost check)
	gen    int                           // bumped when the lease was lost
	called time.Time                     // the keeper's last call
}

// scope is one limit a job is held to: its instance's lease, and what it limits.
type scope struct {
	il         *instLease
	conc, rate bool
}

// instLease is the lease of one scope instance: slot numbers held (free or running a job),
// numbers to ask for again, and rate tokens.
type instLease struct {
	inst    string
	free    []int // held, not running a job
	inUse   int
	reuse   []int                  // numbers not held, to ask for again
	tokens  []tokenBatch           // held, by Grant, oldest first
	used    time.Time              // when a slot or token was last taken
	waiters bool                   // jobs wait in Redis for a slot of it (the keeper's last answer)
	back    []int                  // held numbers to give back at the next keeper call
	unsure  []int                  // numbers asked for in a call whose reply was lost
	backTok []jobstate.TokenReturn // tokens to give back
	calls   int                    // admit.lua calls under way that ask for it
	limit   jobstate.Limit
}

// tokenBatch is rate tokens of one admit.lua call (its stamp, by which they go back) and when
// they were granted.
type tokenBatch struct {
	jobstate.TokenReturn
	at time.Time
}

// tokenCount is how many tokens tb holds.
func tokenCount(tb []tokenBatch) int {
	n := 0
	for _, b := range tb {
		n += b.N
	}
	return n
}

// useToken takes one token of tb, the oldest, and returns what is left.
func useToken(tb []tokenBatch) []tokenBatch {
	tb[0].N--
	if tb[0].N == 0 {
		tb = tb[1:]
	}
	return tb
}

// freshTokens reports whether il holds tokens granted within TokenLife (a token is a start
// granted now, not later): the oldest tell.
func (il *instLease) freshTokens(now time.Time) bool {
	return len(il.tokens) > 0 && now.Sub(il.tokens[0].at) <= TokenLife
}

// giveBackTokens moves il's tokens to those to give back: all of them, or those older than
// TokenLife. Under b.mu.
func (il *instLease) giveBackTokens(now time.Time, all bool) {
	keep := il.tokens[:0]
	for _, t := range il.tokens {
		if all || now.Sub(t.at) > TokenLife {
			il.backTok = append(il.backTok, t.TokenReturn)
		} else {
			keep = append(keep, t)
		}
	}
	il.tokens = keep
	if len(il.tokens) == 0 {
		il.tokens = nil
	}
}

// addTokens adds tb to the tokens il holds, keeping them oldest first. Under b.mu.
func (il *instLease) addTokens(tb []tokenBatch) {
	if len(tb) == 0 {
		return
	}
	il.tokens = append(il.tokens, tb...)
	slices.SortStableFunc(il.tokens, func(a, b tokenBatch) int { return a.at.Compare(b.at) })
}

// NewLeaseBook returns the lease book of a session of worker, whose leases live lease (the
// visibility timeout). No instance is leased more than conc slots (the worker's concurrency);
// batch is its read batch.
func NewLeaseBook(store jobstate.Backend, log zerolog.Logger, worker string, lease time.Duration, conc, batch int) *LeaseBook {
	return &LeaseBook{store: store, log: log, holder: worker + "/" + watermill.NewShortUUID()[:8],
		lease: lease, conc: conc, batch: batch,
		queues: map[string]*QueueLease{}, kick: make(chan struct{}, 1)}
}

// Instances is how many scope instances of q's limits the book holds a lease of, for tests.
func (b *LeaseBook) Instances(q keys.Queue) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ql := b.queues[q.Stream()]; ql != nil {
		return len(ql.insts)
	}
	return 0
}

// Holder is the book's holder name in the lease records (jobstate.Holder).
func (b *LeaseBook) Holder() string { return b.holder }

// SetLimits records the limits of queue q (level 1) read by the limits watcher. When they
// changed, the spare slots and tokens held under the old ones go back, and the jobs are held
// to the new ones from then on.
func (b *LeaseBook) SetLimits(q keys.Queue, limits map[string]jobstate.Limit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ql := b.queues[q.Stream()]
	if ql != nil && maps.Equal(ql.limits, limits) {
		return
	}
	if ql == nil {
		if len(limits) == 0 {
			return
		}
		ql = &QueueLease{q: q, insts: map[string]*instLease{}}
		b.queues[q.Stream()] = ql
	}
	ql.limits = limits
	ql.scopes = map[string]map[string][]scope{}
	for _, il := range ql.insts {
		il.back = append(il.back, il.free...)
		il.free = nil
		il.giveBackTokens(time.Now(), true)
	}
	b.kickLocked()
}

func (b *LeaseBook) kickLocked() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Queue returns the lease of q's queue (any level's view), nil when it has no limits.
func (b *LeaseBook) Queue(q *keys.Queue) *QueueLease {
	b.mu.Lock()
	defer b.mu.Unlock()
	ql := b.queues[q.LevelStream(keys.MinPriority)]
	if ql == nil || len(ql.limits) == 0 {
		return nil
	}
	return ql
}

// scopesOf returns the limits that hold a job of type typ and limit key key. Under b.mu.
func (ql *QueueLease) scopesOf(typ, key string) []scope {
	byKey := ql.scopes[typ]
	if sc, ok := byKey[key]; ok {
		return sc
	}
	var sc []scope
	add := func(field string) {
		l, ok := ql.limits[field]
		if !ok || l.Rate == 0 && l.Concurrency == 0 {
			return
		}
		inst := jobstate.LimitInstance(field, typ, key)
		il := ql.insts[inst]
		if il == nil {
			il = &instLease{inst: inst}
			ql.insts[inst] = il
		}
		il.limit = l
		sc = append(sc, scope{il: il, conc: l.Concurrency > 0, rate: l.Rate > 0})
	}
	add(jobstate.LimitField("", false))
	add(jobstate.LimitField(typ, false))
	if key != "" {
		add(jobstate.LimitField("", true))
		add(jobstate.LimitField(typ, true))
	}
	if byKey == nil {
		byKey = map[string][]scope{}
		ql.scopes[typ] = byKey
	}
	byKey[key] = sc
	return sc
}

// take admits a job held to sc from the lease alone, if it covers every limit (and no
// instance has jobs waiting in Redis, which go first). Under b.mu.
func (b *LeaseBook) take(ql *QueueLease, sc []scope, now time.Time) *Grant {
	for _, s := range sc {
		if s.conc && (s.il.waiters || len(s.il.free) == 0) {
			return nil
		}
		if s.rate && !s.il.freshTokens(now) {
			return nil
		}
	}
	g := &Grant{book: b, ql: ql, gen: ql.gen}
	for _, s := range sc {
		il := s.il
		if s.conc {
			n := il.free[len(il.free)-1]
			il.free = il.free[:len(il.free)-1]
			il.inUse++
			g.slots = append(g.slots, heldSlot{il, n})
		}
		if s.rate {
			il.tokens = useToken(il.tokens)
		}
		il.used = now
	}
	return g
}

// GiveBack returns g's slots to their lease when the job's handler returned (g may be nil:
// the job held none).
func (g *Grant) GiveBack() {
	if g == nil || len(g.slots) == 0 {
		return
	}
	b := g.book
	b.mu.Lock()
	defer b.mu.Unlock()
	kick := false
	for _, s := range g.slots {
		s.il.inUse--
		switch {
		case g.gen != g.ql.gen: // the lease was lost: the slot is gone already
			s.il.reuse = append(s.il.reuse, s.n)
		case s.il.waiters:
			s.il.back = append(s.il.back, s.n)
			kick = true
		default:
			s.il.free = append(s.il.free, s.n)
		}
	}
	if kick {
		b.kickLocked()
	}
}

// lose forgets what the lease held: it ran out, and Redis took it back. Under b.mu.
func (ql *QueueLease) lose() {
	ql.gen++
	for _, il := range ql.insts {
		il.reuse = append(il.reuse, il.free...)
		il.reuse = append(il.reuse, il.back...)
		il.free, il.back, il.tokens, il.backTok = nil, nil, nil, nil
	}
}

// number returns a slot number of il to ask for: one given back, else one the session never
// asked for, of any instance. Under b.mu.
//
// The number is not one of il's own count. The keeper forgets an idle instance in the call
// that gives its spare slots back. A job read meanwhile makes the instance anew. Had the new
// one counted from 0 again, it would ask for the numbers on their way back. Then admit.lua,
// run first, grants such a name, as it is in the set already. The give-back takes it out of
// the set while a job runs on it. Another worker takes the room, and a job more than the
// limit runs.
func (b *LeaseBook) number(il *instLease) int {
	if n := len(il.reuse); n > 0 {
		k := il.reuse[n-1]
		il.reuse = il.reuse[:n-1]
		return k
	}
	b.fresh++
	return b.fresh - 1
}

// AdmitOutcome is what became of a job asked about.
type AdmitOutcome int8

const (
	AdmitFailed   AdmitOutcome = iota // no answer (Redis): ask again, fenced
	AdmitGranted                      // run it
	AdmitDeferred                     // deferred by a limit: not to run now
	AdmitRefused                      // it moved on: not to run
)

// call is one instance's part of an admit.lua call.
type callPart struct {
	il          *instLease
	need        int
	conc, rate  bool
	aside       []int        // free slots set aside for the call's jobs
	asked       []int        // numbers asked for
	tokensAside []tokenBatch // tokens set aside for the call's jobs, then granted by it
	tokensAsked int
}

// Admit admits jobs of ql's queue q (the level view they were read from): from the lease
// where it covers them, else in one admit.lua call. It returns each job's outcome, and the
// Grant of those granted.
func (b *LeaseBook) Admit(ctx context.Context, ql *QueueLease, q *keys.Queue, jobs []jobstate.AdmitItem) ([]AdmitOutcome, []*Grant) {
	outs := make([]AdmitOutcome, len(jobs))
	grants := make([]*Grant, len(jobs))
	now := time.Now()
	b.mu.Lock()
	var pending []int
	scs := make([][]scope, len(jobs))
	for k := range jobs {
		it := &jobs[k]
		scs[k] = ql.scopesOf(it.Type, it.LimitKey)
		if !it.Fence {
			if g := b.take(ql, scs[k], now); g != nil {
				outs[k], grants[k] = AdmitGranted, g
				continue
			}
		}
		pending = append(pending, k)
	}
	if len(pending) == 0 {
		b.mu.Unlock()
		return outs, grants
	}
	var parts []*callPart
	byInst := map[*instLease]*callPart{}
	for _, k := range pending {
		for _, s := range scs[k] {
			p := byInst[s.il]
			if p == nil {
				p = &callPart{il: s.il}
				byInst[s.il] = p
				parts = append(parts, p)
			}
			p.need++
			p.conc = p.conc || s.conc
			p.rate = p.rate || s.rate
		}
	}
	reqs := make([]jobstate.LeaseRequest, len(parts))
	for i, p := range parts {
		il := p.il
		r := jobstate.LeaseRequest{Inst: il.inst}
		l := il.limit
		if p.conc {
			p.aside, il.free = il.free, nil
			if want := p.need - len(p.aside); want > 0 {
				n := want
				if !il.waiters {
					// A block: what the jobs lack and as much again, within the worker's
					// concurrency and the limit. While jobs wait, only what is lacking.
					held := il.inUse + len(p.aside)
					n = max(want, min(2*want, b.conc-held, int(l.Concurrency)-held))
				}
				for range n {
					p.asked = append(p.asked, b.number(il))
				}
			}
			r.Names, r.SlotsAside = p.asked, len(p.aside)
		}
		if p.rate {
			il.giveBackTokens(now, false)
			p.tokensAside, il.tokens = il.tokens, nil
			aside := tokenCount(p.tokensAside)
			if want := p.need - aside; want > 0 {
				p.tokensAsked = min(want+3*b.batch, max(int(l.Rate), want))
			}
			r.Tokens, r.TokensAside = p.tokensAsked, aside
		}
		reqs[i] = r
	}
	items := make([]jobstate.AdmitItem, len(pending))
	for i, k := range pending {
		items[i] = jobs[k]
	}
	for _, p := range parts {
		p.il.calls++
	}
	h := jobstate.Holder{Name: b.holder, Lease: b.lease, Known: ql.known, TokenLife: TokenLife}
	b.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := b.store.Admit(cctx, jobstate.AdmitParams{Queue: q, Holder: h, Reqs: reqs, Items: items})
	cancel()

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range parts {
		p.il.calls--
	}
	if err != nil {
		b.log.Debug().Err(err).Str("queue", q.Name()).Int("jobs", len(items)).
			Msg("could not admit jobs under their queue's limits; asking again")
		for _, p := range parts {
			p.il.unsure = append(p.il.unsure, p.asked...)
			p.il.free = append(p.il.free, p.aside...)
			p.il.addTokens(p.tokensAside)
		}
		b.kickLocked()
		return outs, grants // pending ones: AdmitFailed
	}
	ql.known = true
	if res.Lost {
		b.log.Warn().Str("queue", q.Name()).Msg("this worker's lease of its queue's limits ran out (cut off from Redis for longer than the visibility timeout); leasing again")
		for _, p := range parts {
			p.il.reuse = append(p.il.reuse, p.aside...)
			p.aside, p.tokensAside = nil, nil
		}
		ql.lose()
	}
	// Each part's pool for the call's jobs: what was set aside and what was granted.
	for i, p := range parts {
		gr := res.Grants[i]
		p.il.waiters = gr.Waiting
		got := min(gr.Names, len(p.asked))
		p.aside = append(p.aside, p.asked[:got]...)
		p.il.reuse = append(p.il.reuse, p.asked[got:]...)
		if gr.Tokens > 0 {
			p.tokensAside = append(p.tokensAside, tokenBatch{jobstate.TokenReturn{Stamp: res.Stamp, N: gr.Tokens}, now})
		}
	}
	for i, k := range pending {
		switch res.Jobs[i].Code {
		case script.OK:
			g := &Grant{book: b, ql: ql, gen: ql.gen}
			for _, s := range scs[k] {
				p := byInst[s.il]
				if s.conc && len(p.aside) > 0 {
					n := p.aside[len(p.aside)-1]
					p.aside = p.aside[:len(p.aside)-1]
					s.il.inUse++
					g.slots = append(g.slots, heldSlot{s.il, n})
				}
				if s.rate && len(p.tokensAside) > 0 {
					p.tokensAside = useToken(p.tokensAside)
				}
				s.il.used = now
			}
			outs[k], grants[k] = AdmitGranted, g
		case script.Deferred:
			outs[k] = AdmitDeferred
		default:
			outs[k] = AdmitRefused
		}
	}
	for _, p := range parts {
		il := p.il
		if il.waiters {
			il.back = append(il.back, p.aside...)
		} else {
			il.free = append(il.free, p.aside...)
		}
		il.addTokens(p.tokensAside)
		il.used = now
	}
	return outs, grants
}

// Name, Start and Stop make the lease book the session's lease keeper (a service). It runs
// every keeperTick while it holds a lease of a queue, and at once when kicked. It gives back
// what is spare (leases.lua), renews the lease and learns which instances jobs wait for. When
// the session ends it gives everything back.
func (b *LeaseBook) Name() string { return "lease keeper" }

func (b *LeaseBook) Start(ctx context.Context) error {
	b.loop.Start(ctx, func(ctx context.Context) {
		service.EveryOr(ctx, keeperTick, b.kick, func(ctx context.Context) { b.keep(ctx, false) })
	})
	return nil
}

// Stop ends the keeper and then the session's leases: every slot goes back. A worker that
// cannot reach Redis now leaves them to run out (VisibilityTimeout).
func (b *LeaseBook) Stop() {
	b.loop.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.keep(ctx, true)
}

// keep makes one leases.lua call for each queue whose lease has something to give back or to
// renew (all of them when end).
func (b *LeaseBook) keep(ctx context.Context, end bool) {
	type pending struct {
		ql   *QueueLease
		rets []jobstate.LeaseReturn
	}
	now := time.Now()
	b.mu.Lock()
	var work []pending
	for _, ql := range b.queues {
		if end && !ql.known {
			continue // nothing leased
		}
		var rets []jobstate.LeaseReturn
		holds := false
		for _, il := range ql.insts {
			r := jobstate.LeaseReturn{Inst: il.inst}
			r.Names = append(r.Names, il.back...)
			r.Names = append(r.Names, il.unsure...)
			il.back, il.unsure = nil, nil
			if end || il.waiters || now.Sub(il.used) > leaseIdle {
				r.Names = append(r.Names, il.free...)
				il.free = nil
			}
			il.giveBackTokens(now, end)
			r.Tokens, il.backTok = il.backTok, nil
			// An instance the session holds nothing of, unused a while, is forgotten here and
			// in Redis. A worker sees limit keys come and go (tenants). Neither its map nor
			// its lease record may grow with all it ever saw.
			if !end && il.inUse == 0 && len(il.free) == 0 && len(il.tokens) == 0 && il.calls == 0 &&
				now.Sub(il.used) > leaseIdle {
				r.Forget = true
				delete(ql.insts, il.inst)
				ql.scopes = map[string]map[string][]scope{} // none may point at it
			}
			if len(r.Names) > 0 || len(r.Tokens) > 0 || r.Forget {
				rets = append(rets, r)
			}
			holds = holds || il.inUse > 0 || len(il.free) > 0 || len(il.tokens) > 0
		}
		// A queue whose lease holds nothing is still called now and then (leaseProbe). The
		// call takes back the slots of dead holders. Nothing else might, when jobs wait for
		// them and none are read.
		if end || holds || len(rets) > 0 || len(ql.limits) > 0 && now.Sub(ql.called) >= leaseProbe {
			ql.called = now
			work = append(work, pending{ql, rets})
		}
		if end {
			ql.known = false
		}
	}
	h := jobstate.Holder{Name: b.holder, Lease: b.lease}
	b.mu.Unlock()

	for _, p := range work {
		lost, waiting, err := b.store.Leases(ctx, jobstate.LeasesParams{Queue: &p.ql.q, Holder: h, End: end, Returns: p.rets})
		b.mu.Lock()
		if err != nil {
			if !end {
				// Given back at the next call: giving a slot back twice does nothing.
				for _, r := range p.rets {
					il := p.ql.insts[r.Inst]
					if il == nil { // forgotten in this call: kept until the call goes through
						il = &instLease{inst: r.Inst}
						p.ql.insts[r.Inst] = il
					}
					il.unsure = append(il.unsure, r.Names...)
					il.backTok = append(il.backTok, r.Tokens...)
				}
			}
			b.mu.Unlock()
			if ctx.Err() == nil {
				b.log.Debug().Err(err).Str("queue", p.ql.q.Name()).Msg("could not renew or give back leases of the queue's limits; trying again")
			}
			continue
		}
		for _, r := range p.rets {
			if il := p.ql.insts[r.Inst]; il != nil {
				il.reuse = append(il.reuse, r.Names...)
			}
		}
		if lost && !end && p.ql.known {
			b.log.Warn().Str("queue", p.ql.q.Name()).Msg("this worker's lease of its queue's limits ran out (cut off from Redis for longer than the visibility timeout); leasing again")
			p.ql.lose()
		}
		again := false
		for _, il := range p.ql.insts {
			il.waiters = false
		}
		for _, inst := range waiting {
			if il := p.ql.insts[inst]; il != nil {
				il.waiters = true
				again = again || len(il.free) > 0
			}
		}
		if again {
			b.kickLocked() // give their free slots back now
		}
		b.mu.Unlock()
	}
}
