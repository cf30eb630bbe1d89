package publish

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// RouteTTL is how long a Publisher trusts the partition count it read for a queue before it
// reads it again. So a count changed with CreateQueue in another process reaches every reader
// within this time. A publish does not depend on it. One to a layout that a change left is
// refused by its closed flag, and sent again with the count read again (Publisher.Publish).
const RouteTTL = 5 * time.Second

// KnownTTL is how long a Publisher trusts that a queue it registered is still known. A queue
// deleted elsewhere is added again (or, with RequireQueues, refused) within this time.
const KnownTTL = RouteTTL

// MaxReadCounts bounds the queues that calls which only read (Get, Cancel, Stats) add to the
// route cache. So it does not grow with names a caller makes up. Past it, such a queue's count
// is read from Redis on each call.
const MaxReadCounts = 4096

// layoutChanges counts the partition counts and job defaults that this process changed
// (Relayout). A route read before the latest change is stale at once. So a process that
// changes a count reads its own change on its next call.
var layoutChanges atomic.Int64

// Relayout makes every Publisher of the process read its routes again: the caller changed a
// queue's partition count or job defaults.
func Relayout() { layoutChanges.Add(1) }

// Layouts returns how many times this process called Relayout. A test reads it to tell a
// route read again because a parallel test changed a layout from one read for no reason.
func Layouts() int64 { return layoutChanges.Load() }

// Config is what a Publisher needs. Every field but ReadCounts is required.
type Config struct {
	Store  jobstate.Backend
	Redis  redis.Cmdable // for the counts that calls which only read want (jobstate.PartitionCount)
	Prefix string
	Now    func() time.Time
	// MaxQueues bounds the queues the Publisher remembers as known.
	MaxQueues int
	// ReadCounts bounds the queues that calls which only read add to the route cache:
	// MaxReadCounts when 0, none when negative. Tests set it.
	ReadCounts int
	// AddQueue makes queue known, with the caller's errors (pipeline's addQueue).
	AddQueue func(ctx context.Context, queue string) error
	// Refused reports whether an error of AddQueue says the queue is not known and was not
	// added (ErrQueueNotFound, ErrTooManyQueues): a cached entry of it is then dropped.
	Refused func(error) bool
	// MaxRetries and MaxTimeout bound a queue's job defaults (ParseDefaults).
	MaxRetries int
	MaxTimeout time.Duration
	// ErrBusy is wrapped by the error of jobs a closed layout refused for ClosedRetryFor
	// (pipeline.ErrQueueBusy).
	ErrBusy error
}

// Defaults are a queue's defaults for the jobs published without their own, read from its
// settings record with its partition count (ParseDefaults).
type Defaults struct {
	MaxRetries *int
	Timeout    time.Duration
	// MaxWaiting bounds the queue's waiting jobs (0: no bound), applied per partition
	// (PerPartition); DropOldest is its full policy drop-oldest, false reject.
	MaxWaiting int
	DropOldest bool
	// MaxWaitingPerKey bounds each limit key's unfinished jobs (0: no bound), applied per
	// partition like MaxWaiting (PerPartition); it always refuses, whatever DropOldest says.
	MaxWaitingPerKey int
}

// Bounded reports whether d bounds the queue at all, as a whole or per limit key.
func (d Defaults) Bounded() bool { return d.MaxWaiting > 0 || d.MaxWaitingPerKey > 0 }

// PerPartition is the bound of each of n partitions: ceil(MaxWaiting/n). A partition is a
// slot of its own, which one script cannot count across.
func (d Defaults) PerPartition(n int) int { return share(d.MaxWaiting, n) }

// share is each of n partitions' share of bound: ceil(bound/n).
func share(bound, n int) int {
	if bound <= 0 || n <= 1 {
		return bound
	}
	return (bound + n - 1) / n
}

// PerKeyPerPartition is MaxWaitingPerKey's share of each of n partitions: ceil(MaxWaitingPerKey/n).
func (d Defaults) PerKeyPerPartition(n int) int { return share(d.MaxWaitingPerKey, n) }

// The settings record's fields of the per-queue job defaults and bound.
const (
	FieldMaxRetries = "max_retries"
	FieldTimeout    = "timeout_ms"
	FieldMaxWaiting = "max_waiting"
	FieldFullPolicy = "full_policy"
	// FieldMaxWaitingPerKey bounds each limit key's unfinished jobs (docs/OPERATIONS.md,
	// "Bounded queues").
	FieldMaxWaitingPerKey = "max_waiting_per_key"
)

// The values of FieldFullPolicy; absent is PolicyReject.
const (
	PolicyReject     = "reject"
	PolicyDropOldest = "drop-oldest"
)

// MaxBound bounds a queue's max_waiting and max_waiting_per_key.
const MaxBound = 1 << 30

// ParseDefaults reads the defaults from a settings record's fields, at most maxRetries and
// maxTimeout. A value that does not parse, or is out of bounds, is no default: a publish must
// not fail over a setting.
func ParseDefaults(f map[string]string, maxRetries int, maxTimeout time.Duration) Defaults {
	var d Defaults
	if n, err := strconv.Atoi(f[FieldMaxRetries]); err == nil && n >= 0 && n <= maxRetries {
		d.MaxRetries = &n
	}
	if ms, err := strconv.ParseInt(f[FieldTimeout], 10, 64); err == nil && ms > 0 && ms <= maxTimeout.Milliseconds() {
		d.Timeout = time.Duration(ms) * time.Millisecond
	}
	if n, err := strconv.Atoi(f[FieldMaxWaiting]); err == nil && n > 0 && n <= MaxBound {
		d.MaxWaiting = n
	}
	if n, err := strconv.Atoi(f[FieldMaxWaitingPerKey]); err == nil && n > 0 && n <= MaxBound {
		d.MaxWaitingPerKey = n
	}
	d.DropOldest = f[FieldFullPolicy] == PolicyDropOldest
	return d
}

// Publisher is a Client's publish machinery and its caches. It is safe for concurrent use.
type Publisher struct {
	cfg    Config
	known  sync.Map     // queue name -> *knownQueue, for queues found in the known-queues set
	nknown atomic.Int64 // entries of known, at most cfg.MaxQueues
	parts  sync.Map     // queue name -> *route, for queues enqueued to or read (bounded)
	nread  atomic.Int64 // queues that calls which only read added to parts
	tags   sync.Map     // queue -> *[]keys.Queue, the partitions of the count last enqueued with
}

// New returns a Publisher with empty caches.
func New(cfg Config) *Publisher {
	switch {
	case cfg.ReadCounts == 0:
		cfg.ReadCounts = MaxReadCounts
	case cfg.ReadCounts < 0:
		cfg.ReadCounts = 0
	}
	return &Publisher{cfg: cfg}
}

// knownQueue is a queue found in the known-queues set at a time, with its key names.
type knownQueue struct {
	q  keys.Queue
	at time.Time
}

// route is a queue's partition count, and its defaults for new jobs, as read at a time.
type route struct {
	p            int
	defaults     Defaults
	withDefaults bool // defaults were read (a publish's read); a read-only call's has none
	read         time.Time
	gen          int64 // layoutChanges when it was read
}

// Partitions returns queue's partition count, read from Redis at most every RouteTTL. The
// publish flag says the call publishes to queue. The count of a known queue is then always
// cached (as its keys are, in known). Other calls cache the counts of at most
// Config.ReadCounts queues.
func (p *Publisher) Partitions(ctx context.Context, queue string, publish bool) (int, error) {
	n, _, err := p.Route(ctx, queue, publish)
	return n, err
}

// Route is Partitions with the queue's job defaults, which come in the same round trip. A
// publish's failed read is an error of op "enqueue".
func (p *Publisher) Route(ctx context.Context, queue string, publish bool) (int, Defaults, error) {
	gen := layoutChanges.Load() // before the read: a change after it makes the entry stale
	v, ok := p.parts.Load(queue)
	if ok {
		if r := v.(*route); r.gen == gen && p.cfg.Now().Sub(r.read) < RouteTTL && (r.withDefaults || !publish) {
			return r.p, r.defaults, nil
		}
	}
	// Calls that only read need the count alone: one command, as before the defaults.
	var n int
	var d Defaults
	var err error
	if publish {
		var st jobstate.Settings
		n, st, err = p.cfg.Store.ReadRoute(ctx, queue)
		d = ParseDefaults(st.Fields, p.cfg.MaxRetries, p.cfg.MaxTimeout)
	} else {
		n, err = jobstate.PartitionCount(ctx, p.cfg.Redis, p.cfg.Prefix, queue)
	}
	if err != nil && publish {
		// The caller asked for an enqueue, so that is the operation that failed, whether or
		// not its route was cached (the API answers with this op).
		return 0, Defaults{}, &rediserr.Error{Kind: rediserr.Classify(err), Op: "enqueue", Err: err}
	}
	if err != nil {
		return 0, Defaults{}, err
	}
	// A queue published to is cached once it is known (so at most MaxQueues of them). Before
	// that it is cached as for calls that only read, so made-up names cannot grow the cache.
	known := publish && p.registered(queue)
	if known || ok || p.nread.Load() < int64(p.cfg.ReadCounts) {
		if _, loaded := p.parts.Swap(queue, &route{p: n, defaults: d, withDefaults: publish, read: p.cfg.Now(), gen: gen}); !loaded && !known {
			p.nread.Add(1)
		}
	}
	return n, d, nil
}

// Forget drops queue's cached count, so that the next call reads it.
func (p *Publisher) Forget(queue string) { p.parts.Delete(queue) }

// Register makes queue known (Config.AddQueue) unless the Publisher registered it within
// KnownTTL.
func (p *Publisher) Register(ctx context.Context, queue string) error {
	now := p.cfg.Now()
	v, cached := p.known.Load(queue)
	if cached && now.Sub(v.(*knownQueue).at) < KnownTTL {
		return nil
	}
	if err := p.cfg.AddQueue(ctx, queue); err != nil {
		if cached && p.cfg.Refused(err) {
			if p.known.CompareAndDelete(queue, v) {
				p.nknown.Add(-1)
			}
		}
		return err
	}
	k := &knownQueue{q: keys.New(p.cfg.Prefix, queue), at: now}
	if cached {
		p.known.CompareAndSwap(queue, v, k)
		return nil
	}
	// Remembered up to the bound, so that names a caller makes up cannot grow the cache
	// whatever Redis holds; past it, each publish asks Redis again.
	if p.nknown.Add(1) <= int64(p.cfg.MaxQueues) {
		if _, loaded := p.known.LoadOrStore(queue, k); !loaded {
			return nil
		}
	}
	p.nknown.Add(-1)
	return nil
}

// registered reports whether queue is in the cache of known queues.
func (p *Publisher) registered(queue string) bool {
	_, ok := p.known.Load(queue)
	return ok
}

// Keys returns queue's key names, built once per queue that was enqueued to. Other queues'
// names are built per call: the cache must not grow with names a caller makes up.
func (p *Publisher) Keys(queue string) keys.Queue {
	if k, ok := p.known.Load(queue); ok {
		return k.(*knownQueue).q
	}
	return keys.New(p.cfg.Prefix, queue)
}

// routeKey is what picks a new job's partition: its debounce or unique key, else its id. So
// every job of one key meets the same debounce or de-duplication key.
func routeKey(nj *jobstate.NewJob) string {
	if nj.Debounce != "" {
		return nj.Debounce
	}
	if nj.UniqueKey != "" {
		return nj.UniqueKey
	}
	return nj.ID
}

// Partition returns the keys of the partition, of n, that job nj goes to.
func (p *Publisher) Partition(queue string, nj *jobstate.NewJob, n int) keys.Queue {
	if n <= 1 {
		return p.Keys(queue)
	}
	i := keys.PartitionOf(routeKey(nj), n)
	if v, ok := p.tags.Load(queue); ok {
		if qs := *v.(*[]keys.Queue); len(qs) == n { // a queue's tags depend on n alone
			return qs[i]
		}
	}
	qs := jobstate.PartitionKeys(p.cfg.Prefix, queue, n)
	p.tags.Store(queue, &qs)
	return qs[i]
}

// byPartition orders jobs by the partition, of n, each goes to, keeping their order within a
// partition. It returns the order as indexes into njs, the reordered copy, and the partition
// of each job of that copy.
func byPartition(njs []jobstate.NewJob, n int) ([]int, []jobstate.NewJob, []int) {
	part := make([]int, len(njs))
	count := make([]int, n+1)
	for k := range njs {
		part[k] = keys.PartitionOf(routeKey(&njs[k]), n)
		count[part[k]+1]++
	}
	for i := 1; i <= n; i++ {
		count[i] += count[i-1] // count[i]: where partition i's jobs start
	}
	order := make([]int, len(njs))
	sorted := make([]jobstate.NewJob, len(njs))
	sortedPart := make([]int, len(njs))
	for k := range njs {
		i := count[part[k]]
		count[part[k]]++
		order[i], sorted[i], sortedPart[i] = k, njs[k], part[k]
	}
	return order, sorted, sortedPart
}

// LookupOrder returns the partitions of queue, of n, in the order a lookup of job id tries
// them. The one the id routes to is first, since only a job published with a unique or
// debounce key lives elsewhere.
func LookupOrder(prefix, queue, id string, n int) []keys.Queue {
	qs := jobstate.PartitionKeys(prefix, queue, n)
	if h := keys.PartitionOf(id, n); h > 0 {
		qs[0], qs[h] = qs[h], qs[0]
	}
	return qs
}

// OnPartition runs op on the partition of qs (LookupOrder) that holds job id. It tries qs[0]
// first. When op's error there is notFound (pipeline.ErrNotFound), it tries the one
// jobstate.Store.Locate finds.
func OnPartition(ctx context.Context, js jobstate.Backend, qs []keys.Queue, id string, notFound error, op func(keys.Queue) error) error {
	err := op(qs[0])
	if len(qs) == 1 || !errors.Is(err, notFound) {
		return err
	}
	at, lerr := js.Locate(ctx, qs[1:], []string{id})
	if lerr != nil {
		return fmt.Errorf("find %s/%s: %w", qs[0].Name(), id, lerr)
	}
	if at[0] < 0 {
		return err
	}
	return op(qs[1+at[0]])
}

// Find reads job id from the first of qs (LookupOrder) that has it: qs[0] alone first, then
// the others in one pipeline. So a lookup costs one round trip when the job is where its id
// routes, and two otherwise. It returns the index in qs of the partition that holds the job,
// -1 when none does.
func Find(ctx context.Context, js jobstate.Backend, qs []keys.Queue, id string) (int, jobstate.Record, error) {
	flat, found, err := js.Get(ctx, qs[0], id)
	switch {
	case err != nil:
		return 0, jobstate.Record{}, fmt.Errorf("get %s/%s: %w", qs[0].Name(), id, err)
	case found:
		return 0, jobstate.DecodeRecord(flat), nil
	case len(qs) == 1:
		return -1, jobstate.Record{}, nil
	}
	lookups := make([]jobstate.Lookup, len(qs)-1)
	for k, q := range qs[1:] {
		lookups[k] = jobstate.Lookup{Queue: q, ID: id}
	}
	k, rec, err := js.FindFirst(ctx, lookups)
	if err != nil {
		return 0, jobstate.Record{}, fmt.Errorf("get %s/%s: %w", qs[0].Name(), id, err)
	}
	if k < 0 {
		return -1, jobstate.Record{}, nil
	}
	return k + 1, rec, nil
}
