package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/internal/ulid"
	"github.com/conveyorq/conveyor/stream"
)

// Defaults of ClientConfig and WorkerConfig.
const (
	DefaultMaxRetries      = 5
	defaultMaxPayloadBytes = 1 << 20
	DefaultRetention       = 24 * time.Hour
	// DefaultMinRetention is the default of WorkerConfig.MinRetention and
	// ClientConfig.MinRetention.
	DefaultMinRetention = time.Minute
	// RetainNone, as a retention setting, deletes a job's record as soon as it finishes.
	RetainNone time.Duration = -1
)

// batchChunk bounds the jobs one enqueue script call creates, and batchBytes the payload bytes
// it carries, so a huge batch does not block Redis in one long script.
const (
	batchChunk = 100
	batchBytes = 4 << 20
	// finishChunk bounds the transitions one finish.lua call applies.
	finishChunk = 50
)

// ClientConfig configures a Client. Zero fields take the documented defaults.
type ClientConfig struct {
	// Prefix starts every key. Defaults to "conveyor".
	Prefix string
	// MaxPayloadBytes bounds a job's payload plus its encoded metadata. Defaults to
	// 1 MiB.
	MaxPayloadBytes int
	// MaxRetries is the retry count of jobs enqueued without WithMaxRetries. Defaults to
	// DefaultMaxRetries; set NoRetries for none.
	MaxRetries int
	// Retention is how long Cancel keeps a canceled job's record (jobs enqueued WithRetention
	// keep their own). Defaults to DefaultRetention; RetainNone deletes it at once.
	Retention time.Duration
	// MinRetention is the shortest time Cancel keeps a canceled job's record (a tombstone
	// with RetainNone). So a publish sent again after a lost reply makes no second job. See
	// WorkerConfig.MinRetention. Defaults to DefaultMinRetention.
	MinRetention time.Duration
	// Now returns the current time; tests may replace it. Defaults to time.Now.
	Now func() time.Time
	// Replicas makes every Enqueue and EnqueueBatch wait until this many replicas have the
	// jobs, as WithReplicas (which overrides it per call) says; ReplicaTimeout bounds the
	// wait (default DefaultReplicaTimeout). Zero waits for none.
	Replicas       int
	ReplicaTimeout time.Duration
	// MaxQueues bounds the known queues: Enqueue to a queue that is not known yet fails with
	// ErrTooManyQueues once there are this many (whoever added them). Defaults to
	// 2,000. The Client remembers at most this many queues it registered.
	MaxQueues int
	// RequireQueues makes Enqueue and EnqueueBatch refuse a queue that is not known yet,
	// instead of adding it. A queue is known once created by Inspector.CreateQueue, a worker
	// or an earlier publish. The error wraps ErrQueueNotFound. It suits a publisher whose
	// queue names come from others (conveyor serve --create-queues=false).
	RequireQueues bool
	// TracerProvider records the spans of publishes (see "Tracing" in the README) and gives
	// the trace context the jobs carry to their handlers. Defaults to OpenTelemetry's global
	// provider (otel.GetTracerProvider) as it is at each publish: until the application sets
	// one, nothing is recorded and a publish costs nothing more.
	TracerProvider trace.TracerProvider
}

// NoRetries, as ClientConfig.MaxRetries, makes jobs run once unless WithMaxRetries says more.
const NoRetries = -1

// Client publishes jobs, reads them and cancels them. It is safe for concurrent use.
// Administration (listing jobs by status, replaying and purging dead jobs, deleting a queue) is
// the Inspector's.
type Client struct {
	rdb    redis.UniversalClient
	store  jobstate.Backend
	cfg    ClientConfig
	known  sync.Map     // queue name -> *knownQueue, for queues found in the known-queues set
	nknown atomic.Int64 // entries of known, at most cfg.MaxQueues
	parts  sync.Map     // queue name -> *partCount, for queues enqueued to or read (bounded)
	nread  atomic.Int64 // queues that calls which only read added to parts
	tags   sync.Map     // queue -> *[]keys.Queue, the partitions of the count last enqueued with
	waiter clientWaiter // job events, for Wait
	tracer tracing.Tracer
}

// knownQueue is a queue found in the known-queues set at a time, with its key names.
type knownQueue struct {
	q  keys.Queue
	at time.Time
}

// knownTTL is how long a Client trusts that a queue it registered is still known. A queue
// deleted elsewhere is added again (or, with RequireQueues, refused) within this time.
const knownTTL = partitionsTTL

// partCount is a queue's partition count, and its defaults for new jobs, as read at a time.
type partCount struct {
	p            int
	defaults     queueDefaults
	withDefaults bool // defaults were read (a publish's read); a read-only call's has none
	read         time.Time
	gen          int64 // layoutChanges when it was read
}

// NewClient returns a Client over rdb (a standalone, cluster or failover client). An unusable
// config is an error wrapping ErrInvalid: a negative size or duration other than RetainNone
// and NoRetries.
func NewClient(rdb redis.UniversalClient, cfg ClientConfig) (*Client, error) {
	if rdb == nil {
		panic("pipeline: NewClient with a nil Redis client")
	}
	var errs []error
	if cfg.MaxPayloadBytes < 0 {
		errs = append(errs, invalid("max payload bytes %d is negative", cfg.MaxPayloadBytes))
	}
	if cfg.MaxRetries < NoRetries || cfg.MaxRetries > maxMaxRetries {
		errs = append(errs, invalid("max retries %d outside 0..%d (or NoRetries)", cfg.MaxRetries, maxMaxRetries))
	}
	if cfg.Retention < 0 && cfg.Retention != RetainNone {
		errs = append(errs, invalid("retention %s is negative (RetainNone keeps nothing)", cfg.Retention))
	}
	if cfg.MinRetention < 0 {
		errs = append(errs, invalid("min retention %s is negative", cfg.MinRetention))
	}
	if cfg.MaxQueues < 0 {
		errs = append(errs, invalid("max queues %d is negative", cfg.MaxQueues))
	}
	if err := (replicas{n: cfg.Replicas, timeout: cfg.ReplicaTimeout}).check("client"); err != nil {
		errs = append(errs, err)
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		errs = append(errs, invalid("prefix %q has a brace (it would break the queues' hash tags)", cfg.Prefix))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, keys.DefaultPrefix)
	cfg.MaxPayloadBytes = cmp.Or(cfg.MaxPayloadBytes, defaultMaxPayloadBytes)
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.MinRetention = cmp.Or(cfg.MinRetention, DefaultMinRetention)
	cfg.MaxQueues = cmp.Or(cfg.MaxQueues, defaultMaxQueues)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Client{rdb: rdb, store: jobstate.NewStore(rdb, cfg.Prefix), cfg: cfg, tracer: tracing.New(cfg.TracerProvider)}, nil
}

// Redis returns the client's Redis connection.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Prefix returns the key prefix.
func (c *Client) Prefix() string { return c.cfg.Prefix }

// Enqueue publishes one job to queue: at once, or later with WithDelay or WithRunAt. It returns
// the job as stored. WithID may name a job that exists, or WithUnique a key that a live job
// holds. Then nothing new is written and that existing job is returned with Duplicate set.
// When the job WithID names has another type or payload, Enqueue refuses with ErrConflict. It
// says what differs, and writes nothing. With WithDebounce it returns the job of the key's
// window, scheduled. Debounced is set when the publish joined a pending job (see WithDebounce).
//
// In a queue of several partitions (Inspector.CreateQueue) the job goes to the partition its
// id routes to (keys.PartitionOf). With WithUnique it goes to the one its unique key routes
// to, so that a unique key is held in one place across partitions. Ids are then unique per
// partition. A job id sent again must carry the same unique key (or none again) to find its
// first copy.
//
// The job carries the trace context of ctx, or of the publish span it records under a tracer
// provider (ClientConfig.TracerProvider), in its metadata: see "Tracing" in the README.
func (c *Client) Enqueue(ctx context.Context, queue string, task Task, opts ...Option) (*Job, error) {
	ctx, pt := c.startPublish(ctx, queue, &task, nil)
	if pt == nil {
		return c.enqueue(ctx, queue, &task, nil, opts)
	}
	j, err := c.enqueue(ctx, queue, &task, pt, opts)
	if j != nil {
		pt.end([]*Job{j}, err)
	} else {
		pt.end(nil, err)
	}
	return j, err
}

// enqueue is Enqueue with the publish's tracing (nil for none).
func (c *Client) enqueue(ctx context.Context, queue string, task *Task, pt *publishTrace, opts []Option) (_ *Job, err error) {
	defer func() { err = outOfMemory(err) }()
	if err := c.check(queue, ""); err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	var nj jobstate.NewJob
	j, err := c.prepare(queue, task, now, opts, pt.forTask(task), &nj)
	if err != nil {
		return nil, err
	}
	// One read of the queue's route: its partition count and its job defaults together.
	p, d, err := c.route(ctx, queue, true)
	if err != nil {
		return nil, err
	}
	d.apply(opts, task, j, &nj)
	rw := c.replicasFor(opts, nil).writer(c.rdb) // durable.go
	if !nj.Plain(now) {
		jobs, err := c.publish(ctx, c.store.Via(rw.scripter(c.rdb)), queue, p, []*Job{j}, []jobstate.NewJob{nj}, now)
		if err != nil {
			return nil, err
		}
		return jobs[0], rw.check(nil)
	}
	// The most common publish, without publish's slices: the one-job script, sent again like
	// publish does when a closed layout refuses it.
	start := time.Now()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		got, err := c.enqueuePlain(ctx, c.store.Via(rw.scripter(c.rdb)), c.partition(queue, &nj, p), j, &nj)
		if !errors.Is(err, jobstate.ErrClosed) {
			if err != nil {
				return got, err
			}
			return got, rw.check(nil)
		}
		if err := c.closedWait(ctx, queue, start, wait, 1); err != nil {
			return nil, err
		}
		if p, err = c.partitions(ctx, queue, true); err != nil {
			return nil, err
		}
	}
}

// EnqueueBatch publishes many jobs to queue in one round trip. It makes one script call per
// chunk of up to 100 jobs, all chunks pipelined. The opts apply to every task, then each
// task's own Opts. Every task is validated before anything is written, so bad input writes
// nothing. On a Redis error some chunks may have been written. The returned jobs carry their
// ids, and calling again with those ids (WithID) is idempotent.
//
// Jobs that existed already come back with Duplicate set. A task whose id names a job with
// another type or payload is not written. Its error (wrapping ErrConflict, one per such task)
// comes back with the other jobs, which were written. In a partitioned queue the jobs are
// grouped by partition, each group chunked as above, all chunks still in one pipeline. Tasks
// with a debounce key (WithDebounce) are one script call each, in the batch's order. A later
// task of a key joins the job of an earlier one, and the last one's payload wins.
//
// The jobs carry the trace context of ctx, or of the one publish span the call records under a
// tracer provider, as Enqueue's do.
func (c *Client) EnqueueBatch(ctx context.Context, queue string, tasks []Task, opts ...Option) ([]*Job, error) {
	if len(tasks) == 0 {
		return c.enqueueBatch(ctx, queue, tasks, nil, opts)
	}
	ctx, pt := c.startPublish(ctx, queue, nil, tasks)
	if pt == nil {
		return c.enqueueBatch(ctx, queue, tasks, nil, opts)
	}
	jobs, err := c.enqueueBatch(ctx, queue, tasks, pt, opts)
	pt.end(jobs, err)
	return jobs, err
}

// enqueueBatch is EnqueueBatch with the publish's tracing (nil for none).
func (c *Client) enqueueBatch(ctx context.Context, queue string, tasks []Task, pt *publishTrace, opts []Option) (_ []*Job, err error) {
	defer func() { err = outOfMemory(err) }()
	if err := c.check(queue, ""); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	now := c.cfg.Now()
	jobs := make([]*Job, len(tasks))
	njs := make([]jobstate.NewJob, len(tasks))
	for i := range tasks {
		j, err := c.prepare(queue, &tasks[i], now, opts, pt.forTask(&tasks[i]), &njs[i])
		if err != nil {
			if len(tasks) > 1 {
				return nil, fmt.Errorf("task %d: %w", i, err)
			}
			return nil, err
		}
		jobs[i] = j
	}
	p, d, err := c.route(ctx, queue, true)
	if err != nil {
		return nil, err
	}
	for i := range tasks {
		d.apply(opts, &tasks[i], jobs[i], &njs[i])
	}
	rw := c.replicasFor(opts, tasks).writer(c.rdb) // durable.go
	jobs, err = c.publish(ctx, c.store.Via(rw.scripter(c.rdb)), queue, p, jobs, njs, now)
	return jobs, rw.check(err)
}

// closedRetryFor bounds how long publish writes again jobs that a closed layout refused. A
// change of the partition count keeps the old layout closed and the new one not yet open for
// a few round trips. Longer means a change stopped half-way (CreateQueue again repairs it).
const closedRetryFor = 5 * time.Second

// publish writes prepared jobs to queue in the layout of p, its partition count as the caller
// read it. Some jobs are refused because their partition is closed (its count changed:
// Inspector.CreateQueue). They are written again after the count is read again, with a short
// backoff, for up to closedRetryFor. So no job is written to a layout that no worker of the
// new count reads.
func (c *Client) publish(ctx context.Context, js jobstate.Backend, queue string, p int, jobs []*Job, njs []jobstate.NewJob, now time.Time) ([]*Job, error) {
	var idx []int // the indexes of the jobs still to write; nil: all of them
	var conflicts []error
	start := time.Now()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		sj, sn := jobs, njs
		if idx != nil {
			sj, sn = make([]*Job, len(idx)), make([]jobstate.NewJob, len(idx))
			for k, i := range idx {
				sj[k], sn[k] = jobs[i], njs[i]
			}
		}
		res, closed, err := c.publishOnce(ctx, js, queue, p, sj, sn, now)
		if res != nil && idx == nil {
			copy(jobs, res)
		} else if res != nil {
			for k, i := range idx {
				jobs[i] = res[k]
			}
		}
		if err != nil && !errors.Is(err, ErrConflict) {
			return jobs, err
		}
		if err != nil {
			conflicts = append(conflicts, err)
		}
		if len(closed) == 0 {
			return jobs, errors.Join(conflicts...)
		}
		if idx != nil {
			for k, i := range closed {
				closed[k] = idx[i]
			}
		}
		idx = closed
		if err := c.closedWait(ctx, queue, start, wait, len(idx)); err != nil {
			return jobs, err
		}
		if p, err = c.partitions(ctx, queue, true); err != nil {
			return jobs, err
		}
	}
}

// closedWait is what a publish that a closed layout refused does before it tries again, from
// start on. It drops queue's cached count, so the next try reads it, and waits wait. It
// refuses with ErrQueueBusy once closedRetryFor has passed.
func (c *Client) closedWait(ctx context.Context, queue string, start time.Time, wait time.Duration, jobs int) error {
	c.parts.Delete(queue)
	if time.Since(start) > closedRetryFor {
		return fmt.Errorf("enqueue to %s: %w: %d jobs refused for %s since its partition count is being changed; if no change runs now, one stopped half-way: run queues create with the count again",
			queue, ErrQueueBusy, jobs, closedRetryFor)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// publishOnce is one try of publish over p partitions. A single plain job goes with the
// one-job script: it costs Redis half, and a router's publish often is one job. Others go
// with enqueuePrepared.
// It returns the indexes of the jobs refused by a closed partition.
func (c *Client) publishOnce(ctx context.Context, js jobstate.Backend, queue string, p int, jobs []*Job, njs []jobstate.NewJob, now time.Time) ([]*Job, []int, error) {
	if len(jobs) == 1 && njs[0].Plain(now) {
		j, err := c.enqueuePlain(ctx, js, c.partition(queue, &njs[0], p), jobs[0], &njs[0])
		if errors.Is(err, jobstate.ErrClosed) {
			return jobs, []int{0}, nil
		}
		return []*Job{cmp.Or(j, jobs[0])}, nil, err
	}
	return c.enqueuePrepared(ctx, js, queue, p, jobs, njs, now)
}

// maxReadCounts bounds the queues that calls which only read (Get, Cancel, Stats) add to the
// partition-count cache. So it does not grow with names a caller makes up. Past it, such a
// queue's count is read from Redis on each call.
const maxReadCounts = 4096

// partitions returns queue's partition count, read from Redis at most every partitionsTTL.
// The publish flag says the call publishes to queue. The count of a known queue is then always
// cached (as its keys are, in known). Other calls cache the counts of at most maxReadCounts
// queues.
func (c *Client) partitions(ctx context.Context, queue string, publish bool) (int, error) {
	p, _, err := c.route(ctx, queue, publish)
	return p, err
}

// queueDefaults returns queue's job defaults, read with its partition count (route): the
// publish that follows finds both cached, so the defaults cost it no call.
func (c *Client) queueDefaults(ctx context.Context, queue string) (queueDefaults, error) {
	_, d, err := c.route(ctx, queue, true)
	return d, err
}

// route is partitions with the queue's job defaults, which come in the same round trip.
func (c *Client) route(ctx context.Context, queue string, publish bool) (int, queueDefaults, error) {
	gen := layoutChanges.Load() // before the read: a change after it makes the entry stale
	v, ok := c.parts.Load(queue)
	if ok {
		if pc := v.(*partCount); pc.gen == gen && c.cfg.Now().Sub(pc.read) < partitionsTTL && (pc.withDefaults || !publish) {
			return pc.p, pc.defaults, nil
		}
	}
	// Calls that only read need the count alone: one command, as before the defaults.
	var p int
	var d queueDefaults
	var err error
	if publish {
		var st jobstate.Settings
		p, st, err = c.store.ReadRoute(ctx, queue)
		d = defaultsOf(st.Fields)
	} else {
		p, err = partitionCount(ctx, c.rdb, c.cfg.Prefix, queue)
	}
	if err != nil && publish {
		// The caller asked for an enqueue, so that is the operation that failed, whether or
		// not its route was cached (the API answers with this op).
		return 0, queueDefaults{}, &rediserr.Error{Kind: rediserr.Classify(err), Op: "enqueue", Err: err}
	}
	if err != nil {
		return 0, queueDefaults{}, err
	}
	// A queue published to is cached once it is known (so at most MaxQueues of them). Before
	// that it is cached as for calls that only read, so made-up names cannot grow the cache.
	known := publish && c.registered(queue)
	if known || ok || c.nread.Load() < maxReadCounts {
		if _, loaded := c.parts.Swap(queue, &partCount{p: p, defaults: d, withDefaults: publish, read: c.cfg.Now(), gen: gen}); !loaded && !known {
			c.nread.Add(1)
		}
	}
	return p, d, nil
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

// partition returns the keys of the partition, of p, that job nj goes to.
func (c *Client) partition(queue string, nj *jobstate.NewJob, p int) keys.Queue {
	if p <= 1 {
		return c.keys(queue)
	}
	i := keys.PartitionOf(routeKey(nj), p)
	if v, ok := c.tags.Load(queue); ok {
		if qs := *v.(*[]keys.Queue); len(qs) == p { // a queue's tags depend on p alone
			return qs[i]
		}
	}
	qs := allPartitions(c.cfg.Prefix, queue, p)
	c.tags.Store(queue, &qs)
	return qs[i]
}

// enqueuePrepared writes validated jobs with enqueue.lua, chunked and pipelined: jobs of p > 1
// partitions are grouped by partition, each group chunked, all chunks in one pipeline.
// It returns the indexes in jobs of those a closed partition refused (see publish).
func (c *Client) enqueuePrepared(ctx context.Context, js jobstate.Backend, queue string, p int, jobs []*Job, njs []jobstate.NewJob, now time.Time) ([]*Job, []int, error) {
	if err := c.registerQueue(ctx, queue); err != nil {
		return nil, nil, err
	}
	// order[k] is the index in jobs of the k-th job written; njs is reordered alike, so that
	// each partition's jobs are contiguous.
	var order, part []int // part[k]: the partition of njs[k], when p > 1
	if p > 1 {
		order, njs, part = c.byPartition(njs, p)
	}
	at := func(k int) int {
		if order == nil {
			return k
		}
		return order[k]
	}

	b := js.Batch()
	var created []*jobstate.Pending[[]jobstate.Created] // per call; nil for a debounce call
	var debounces []*jobstate.Pending[jobstate.Debounced]
	var spans [][2]int // njs[lo:hi] per call
	for lo := 0; lo < len(njs); {
		q := c.partition(queue, &njs[lo], p)
		if njs[lo].Debounce != "" {
			// One debounce.lua call per debounced job, in the batch's order. One key's calls
			// share a slot, so a pipeline keeps their order. A later task of the same key
			// joins the job of an earlier one.
			debounces = append(debounces, b.Debounce(q, &njs[lo]))
			created = append(created, nil)
			spans = append(spans, [2]int{lo, lo + 1})
			lo++
			continue
		}
		hi, bytes := lo, 0
		for hi < len(njs) && hi-lo < batchChunk && (hi == lo || bytes+len(njs[hi].Payload) <= batchBytes) &&
			(p <= 1 || part[hi] == part[lo]) && njs[hi].Debounce == "" {
			bytes += len(njs[hi].Payload)
			hi++
		}
		created = append(created, b.Enqueue(q, now, njs[lo:hi]))
		debounces = append(debounces, nil)
		spans = append(spans, [2]int{lo, hi})
		lo = hi
	}

	if err := b.Exec(ctx); err != nil {
		return jobs, nil, fmt.Errorf("enqueue to %s: %w", queue, rediserr.Wrap("enqueue", err))
	}
	var existing, closed []int
	var conflicts []error
	for ci, span := range spans {
		lo, hi := span[0], span[1]
		if njs[lo].Debounce != "" {
			d, err := debounces[ci].Result()
			if errors.Is(err, jobstate.ErrClosed) {
				closed = append(closed, at(lo))
				continue
			}
			if err != nil {
				return jobs, nil, fmt.Errorf("enqueue to %s: %w", queue, err)
			}
			debounced(jobs[at(lo)], &njs[lo], d)
			continue
		}
		rows, err := created[ci].Result()
		if errors.Is(err, jobstate.ErrClosed) {
			for k := lo; k < hi; k++ {
				closed = append(closed, at(k))
			}
			continue
		}
		if err != nil {
			return jobs, nil, fmt.Errorf("enqueue to %s: %w", queue, err)
		}
		for k, row := range rows {
			j := jobs[at(lo+k)]
			switch row.Code {
			case script.OK:
				if row.Entry == "" && (njs[lo+k].Group == "" || j.RunAt.After(now)) {
					j.Status = StatusScheduled
				} else if row.Entry == "" {
					j.Status, j.EnqueuedAt = StatusQueued, now // waiting for a place in its group's window
				} else {
					j.Status, j.Entry, j.EnqueuedAt = StatusQueued, row.Entry, now
				}
			case script.Exists:
				existing = append(existing, at(lo+k))
			case script.UniqueHeld:
				j.ID = row.Holder
				existing = append(existing, at(lo+k))
			case script.Conflict:
				conflicts = append(conflicts, conflict(j.ID, row.Differs))
				if len(jobs) > 1 {
					conflicts[len(conflicts)-1] = fmt.Errorf("task %d: %w", at(lo+k), conflicts[len(conflicts)-1])
				}
			}
		}
	}
	for _, i := range existing {
		jobs[i].Duplicate = true
		got, err := c.Get(ctx, queue, jobs[i].ID)
		if errors.Is(err, ErrNotFound) {
			// It finished and expired between the two calls: report what was asked for.
			continue
		}
		if err != nil {
			return jobs, nil, err
		}
		got.Duplicate = true
		jobs[i] = got
	}
	return jobs, closed, errors.Join(conflicts...)
}

// debounced sets what debounce.lua answered for job j, published as nj.
func debounced(j *Job, nj *jobstate.NewJob, d jobstate.Debounced) {
	j.ID, j.Status, j.RunAt, j.CreatedAt, j.Version, j.Debounced = d.ID, StatusScheduled, d.RunAt, d.CreatedAt, d.Version, d.Joined
	j.Debounce = &DebounceWindow{Key: nj.Debounce, First: d.CreatedAt, Until: d.Until, Publishes: d.Publishes}
}

// byPartition orders jobs by the partition, of p, each goes to, keeping their order within a
// partition. It returns the order as indexes into njs, the reordered copy, and the partition
// of each job of that copy.
func (c *Client) byPartition(njs []jobstate.NewJob, p int) ([]int, []jobstate.NewJob, []int) {
	part := make([]int, len(njs))
	count := make([]int, p+1)
	for k := range njs {
		part[k] = keys.PartitionOf(routeKey(&njs[k]), p)
		count[part[k]+1]++
	}
	for i := 1; i <= p; i++ {
		count[i] += count[i-1] // count[i]: where partition i's jobs start
	}
	order := make([]int, len(njs))
	sorted := make([]jobstate.NewJob, len(njs))
	sortedPart := make([]int, len(njs))
	for k := range njs {
		n := count[part[k]]
		count[part[k]]++
		order[n], sorted[n], sortedPart[n] = k, njs[k], part[k]
	}
	return order, sorted, sortedPart
}

// conflict is the error of a publish whose id names a job with another type or payload.
func conflict(id, differs string) error {
	return fmt.Errorf("%w: job %s exists with a different %s", ErrConflict, id, strings.ReplaceAll(differs, ",", " and "))
}

// enqueuePlain creates a plain job (jobstate.NewJob.Plain) with Store.Enqueue1 in q, the
// queue or the partition the job goes to.
func (c *Client) enqueuePlain(ctx context.Context, js jobstate.Backend, q keys.Queue, j *Job, nj *jobstate.NewJob) (*Job, error) {
	queue := q.Name()
	if err := c.registerQueue(ctx, queue); err != nil {
		return nil, err
	}
	row, err := js.Enqueue1(ctx, q, j.CreatedAt, nj)
	if err != nil {
		return nil, fmt.Errorf("enqueue to %s: %w", queue, err)
	}
	switch row.Code {
	case script.Conflict:
		return nil, conflict(j.ID, row.Differs)
	case script.Exists:
		j.Duplicate = true
		got, err := c.Get(ctx, queue, j.ID)
		if errors.Is(err, ErrNotFound) {
			return j, nil // it finished and expired between the two calls
		}
		if got != nil {
			got.Duplicate = true
		}
		return got, err
	}
	j.Status, j.Entry, j.EnqueuedAt = StatusQueued, row.Entry, j.CreatedAt
	return j, nil
}

// prepare validates a task and its options, fills nj with what the enqueue script writes and
// returns the job as it will be stored. A non-nil tc is the trace context the job carries
// (startPublish), set over the metadata's own.
func (c *Client) prepare(queue string, t *Task, now time.Time, common []Option, tc map[string]string, nj *jobstate.NewJob) (*Job, error) {
	var o enqueueOptions
	for _, opt := range common {
		opt(&o)
	}
	for _, opt := range t.Opts {
		opt(&o)
	}
	if len(o.errs) > 0 {
		return nil, errors.Join(o.errs...)
	}
	if err := o.debounceConflict(); err != nil {
		return nil, err
	}
	if err := validateType(t.Type); err != nil {
		return nil, err
	}
	id, chosen := o.id, o.id != ""
	if !chosen {
		id = NewID()
	} else if err := keys.ValidateID(id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	md := t.Metadata
	if len(o.metadata) > 0 || tc != nil {
		merged := make(map[string]string, len(md)+len(o.metadata)+len(tc))
		for k, v := range md {
			merged[k] = v
		}
		for k, v := range o.metadata {
			merged[k] = v
		}
		if tc != nil {
			// The publish span's trace context replaces one the task carried (a batch's
			// span links to it; a single task's was the span's parent).
			delete(merged, tracing.KeyTracestate)
			for k, v := range tc {
				merged[k] = v
			}
		}
		md = merged
	}
	if err := validateMetadata(md); err != nil {
		return nil, err
	}
	encMD, err := stream.EncodeMetadata(md)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if size := len(t.Payload) + len(encMD); size > c.cfg.MaxPayloadBytes {
		return nil, fmt.Errorf("%w: %d bytes of payload and metadata, the limit is %d", ErrPayloadTooLarge, size, c.cfg.MaxPayloadBytes)
	}
	runAt, err := o.dueAt(now)
	if err != nil {
		return nil, err
	}
	maxRetries := c.cfg.MaxRetries
	if o.hasRetries {
		maxRetries = o.maxRetries
	}
	*nj = jobstate.NewJob{ID: id, Type: t.Type, Payload: t.Payload, Metadata: encMD,
		MaxRetries: maxRetries, Timeout: o.timeout, RunAt: runAt, ChosenID: chosen}
	if o.hasRetain {
		nj.Retention, nj.KeepOwn = o.retention, true
	}
	if o.hasUnique {
		nj.UniqueKey, nj.UniqueTTL = o.uniqueKey, o.uniqueTTL
	}
	if o.hasDebounce {
		nj.Debounce, nj.DebounceQuiet, nj.DebounceMaxWait = o.debounceKey, o.debounceQuiet, o.debounceMaxWait
	}
	nj.LimitKey, nj.Group = o.limitKey, o.group
	nj.Priority = o.priority()
	return &Job{
		ID: id, Queue: queue, Type: t.Type, Payload: t.Payload, Metadata: md, Priority: nj.Priority, Group: o.group,
		MaxRetries: maxRetries, Timeout: time.Duration(timeoutMS(o.timeout)) * time.Millisecond,
		CreatedAt: now, RunAt: runAt, Version: 1,
	}, nil
}

func (c *Client) registerQueue(ctx context.Context, queue string) error {
	now := c.cfg.Now()
	v, cached := c.known.Load(queue)
	if cached && now.Sub(v.(*knownQueue).at) < knownTTL {
		return nil
	}
	if err := addQueue(ctx, c.store, queue, c.cfg.MaxQueues, c.cfg.RequireQueues); err != nil {
		if cached && (errors.Is(err, ErrQueueNotFound) || errors.Is(err, ErrTooManyQueues)) {
			if c.known.CompareAndDelete(queue, v) {
				c.nknown.Add(-1)
			}
		}
		return err
	}
	k := &knownQueue{q: keys.New(c.cfg.Prefix, queue), at: now}
	if cached {
		c.known.CompareAndSwap(queue, v, k)
		return nil
	}
	// Remembered up to the bound, so that names a caller makes up cannot grow the cache
	// whatever Redis holds; past it, each publish asks Redis again.
	if c.nknown.Add(1) <= int64(c.cfg.MaxQueues) {
		if _, loaded := c.known.LoadOrStore(queue, k); !loaded {
			return nil
		}
	}
	c.nknown.Add(-1)
	return nil
}

// registered reports whether queue is in the client's cache of known queues.
func (c *Client) registered(queue string) bool {
	_, ok := c.known.Load(queue)
	return ok
}

// validate checks a queue name and, unless empty, a job id, wrapping ErrInvalid.
func validate(queue, id string) error {
	if err := keys.ValidateQueue(queue); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if id != "" {
		if err := keys.ValidateID(id); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// check validates a queue name and, unless empty, a job id.
func (c *Client) check(queue, id string) error { return validate(queue, id) }

// keys returns queue's key names, built once per queue that was enqueued to. Other queues'
// names are built per call: the cache must not grow with names a caller makes up.
func (c *Client) keys(queue string) keys.Queue {
	if k, ok := c.known.Load(queue); ok {
		return k.(*knownQueue).q
	}
	return keys.New(c.cfg.Prefix, queue)
}

// NewID returns a new job id: a ULID (26 characters, sortable by creation time).
func NewID() string { return ulid.Make().String() }

// Get returns the job's current state, or ErrNotFound. In a partitioned queue it looks in the
// partition the id routes to first, then in the others (one pipeline). So the caller need not
// know where a job published with a unique key went.
func (c *Client) Get(ctx context.Context, queue, id string) (*Job, error) {
	if err := c.checkJob(queue, id); err != nil {
		return nil, err
	}
	p, err := c.partitions(ctx, queue, false)
	if err != nil {
		return nil, err
	}
	if p <= 1 {
		return getJob(ctx, c.store, c.keys(queue), id)
	}
	j, _, err := findJob(ctx, c.store, lookupOrder(c.cfg.Prefix, queue, id, p), id)
	return j, err
}

// getJob reads job id of q (Client.Get and Inspector.Get).
func getJob(ctx context.Context, js jobstate.Backend, q keys.Queue, id string) (*Job, error) {
	flat, found, err := js.Get(ctx, q, id)
	return gotJob(q, id, flat, found, err)
}

// gotJob is the Job of a Store.Get reply.
func gotJob(q keys.Queue, id string, flat []string, found bool, err error) (*Job, error) {
	if err != nil {
		return nil, fmt.Errorf("get %s/%s: %w", q.Name(), id, err)
	}
	if !found {
		return nil, ErrNotFound
	}
	return jobFromHash(q.Name(), id, flat)
}

// jobFromHash builds a Job from a hash's flat field/value list.
func jobFromHash(queue, id string, flat []string) (*Job, error) {
	return jobFromRecord(queue, id, jobstate.DecodeRecord(flat))
}

// jobFromRecord builds job id of queue from its record.
func jobFromRecord(queue, id string, r jobstate.Record) (*Job, error) {
	j := &Job{ID: id, Queue: queue, Type: r.Type, Status: Status(r.Status), Attempt: r.Attempt,
		MaxRetries: r.MaxRetries, Timeout: r.Timeout, CreatedAt: r.CreatedAt, RunAt: r.RunAt,
		EnqueuedAt: r.EnqueuedAt, StartedAt: r.StartedAt, CompletedAt: r.CompletedAt,
		Worker: r.Worker, Entry: r.Entry, LastError: r.LastError, Result: r.Result,
		Version: r.Version, Payload: r.Payload, Priority: r.Priority, Group: r.Group,
		ScheduledFor: r.ScheduledFor, Snoozes: r.Snoozes, Attempts: attemptsOf(r)}
	if r.WorkflowKey != "" {
		// The key is <prefix>:{<queue>}:wf:<id>: a queue name holds no '}', an id may hold ':'.
		_, j.Workflow, _ = strings.Cut(r.WorkflowKey, "}:wf:")
		j.Task = r.Task
	}
	if r.Debounce != "" {
		j.Debounce = &DebounceWindow{Key: keys.DebounceKeyOf(r.Debounce), First: r.DebounceFirst,
			Until: r.DebounceUntil, Publishes: r.DebouncePubs}
	}
	if p := r.Progress; p != nil && p.Shown(r.Status, r.Attempt, r.Entry) {
		j.Reported = &Progress{Percent: p.Percent, Message: p.Message, At: p.At}
	}
	if r.Metadata != "" {
		md := map[string]string{}
		if err := stream.DecodeMetadata(r.Metadata, md); err != nil {
			return nil, fmt.Errorf("job %s: %w", id, err)
		}
		j.Metadata = md
	}
	return j, nil
}

// Cancel cancels a job that has not finished. A scheduled or queued job never runs. A running
// job's handler has its context cancelled within milliseconds, with cause ErrJobCanceled. The
// worker hears the cancel on the queue's job events. If it missed it, its next lease renewal
// cancels with cause stream.ErrLeaseLost. Whatever the handler returns is discarded: the job
// stays canceled, never retried. The job is canceled when Cancel returns; Wait on it returns
// at once. It returns ErrNotCancelable for a finished job and ErrNotFound for an unknown one.
func (c *Client) Cancel(ctx context.Context, queue, id string) error {
	if err := c.checkJob(queue, id); err != nil {
		return err
	}
	p, err := c.partitions(ctx, queue, false)
	if err != nil {
		return err
	}
	now := c.cfg.Now()
	if p <= 1 {
		return cancelJob(ctx, c.store, c.keys(queue), id, now, c.cfg.Retention, c.cfg.MinRetention)
	}
	return onPartition(ctx, c.store, lookupOrder(c.cfg.Prefix, queue, id, p), id, func(q keys.Queue) error {
		return cancelJob(ctx, c.store, q, id, now, c.cfg.Retention, c.cfg.MinRetention)
	})
}

// cancelJob cancels job id of q (Client.Cancel and Inspector.Cancel); a canceled record is kept
// for retention, but at least minRetention. A task of a workflow cancels the tasks that wait
// for it. The same call cancels up to jobstate.CascadeStep of them. The rest go in calls of
// that size after it, before cancelJob returns.
func cancelJob(ctx context.Context, js jobstate.Backend, q keys.Queue, id string, now time.Time, retention, minRetention time.Duration) error {
	row, err := js.Cancel(ctx, q, jobstate.CancelParams{ID: id, Now: now, Retention: retention,
		MinRetention: minRetention, Events: js.Events(ctx)})
	if err != nil {
		return fmt.Errorf("cancel %s/%s: %w", q.Name(), id, err)
	}
	switch row.Code {
	case script.OK:
		if row.Data != "" && row.Data != "0" {
			// The cancel is done: what is left is the cascade's rest (a wide workflow), which
			// the queue's recoverer finishes should these calls fail or the process die.
			_ = followCascade(ctx, js, q, now)
		}
		return nil
	case script.WrongState:
		return fmt.Errorf("%w (%s)", ErrNotCancelable, row.Data)
	case script.NotFound:
		return ErrNotFound
	}
	return fmt.Errorf("cancel %s/%s: unexpected reply %v", q.Name(), id, row.Code)
}

// QueueStats are a queue's gauges and counters.
type QueueStats struct {
	Queue string `json:"queue"`
	// Gauges: jobs in each place now.
	Scheduled  int64 `json:"scheduled"`
	Queued     int64 `json:"queued"`
	InProgress int64 `json:"in_progress"`
	Dead       int64 `json:"dead"`
	// Counters since the queue was created.
	Enqueued       int64 `json:"enqueued"`
	Completed      int64 `json:"completed"`
	Failed         int64 `json:"failed"`
	Retried        int64 `json:"retried"`
	Recovered      int64 `json:"recovered"`
	DeadByRecovery int64 `json:"dead_by_recovery"`
	Refused        int64 `json:"refused"`
	Canceled       int64 `json:"canceled"`
	Released       int64 `json:"released"`
	Poison         int64 `json:"poison"`
	// Debounced counts the publishes that joined a pending debounced job (WithDebounce)
	// instead of creating one: each created job counts in Enqueued.
	Debounced int64 `json:"debounced"`
	// Paused: the queue is paused (Inspector.Pause); workers do not read it. Set by the
	// Inspector's Queues and Stats; Client.Stats leaves it false.
	Paused bool `json:"paused"`
	// Limited counts the jobs a flow-control limit deferred (Limit): each waited, and was no
	// attempt.
	Limited int64 `json:"limited"`
	// GroupWaiting is how many of the Queued jobs wait for a place in their fair group's window
	// (WithGroup). They are queued, but not yet in the stream for a worker to read.
	GroupWaiting int64 `json:"group_waiting"`
}

// Stats reads a queue's gauges and counters in one round trip (one per node involved on a
// cluster); a partitioned queue's are the sums over its partitions.
func (c *Client) Stats(ctx context.Context, queue string) (*QueueStats, error) {
	if err := c.check(queue, ""); err != nil {
		return nil, err
	}
	p, err := c.partitions(ctx, queue, false)
	if err != nil {
		return nil, err
	}
	if p <= 1 {
		st, err := readStats(ctx, c.store, []keys.Queue{c.keys(queue)})
		if err != nil {
			return nil, err
		}
		return st[0], nil
	}
	return queueStats(ctx, c.store, c.cfg.Prefix, queue, p)
}

// readStats reads the gauges and counters of queues qs in one pipeline (jobstate.Store.ReadStats).
func readStats(ctx context.Context, js jobstate.Backend, qs []keys.Queue) ([]*QueueStats, error) {
	st, err := js.ReadStats(ctx, qs)
	if err != nil {
		return nil, err
	}
	out := make([]*QueueStats, len(st))
	for k, s := range st {
		out[k] = (*QueueStats)(s)
	}
	return out, nil
}
