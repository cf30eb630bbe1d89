package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/internal/ulid"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// Defaults of ClientConfig and WorkerConfig.
const (
	defaultMaxRetries      = 5
	defaultMaxPayloadBytes = 1 << 20
	defaultRetention       = 24 * time.Hour
	// defaultMinRetention is the default of WorkerConfig.MinRetention and
	// ClientConfig.MinRetention.
	defaultMinRetention = time.Minute
	// RetainNone, as a retention setting, deletes a job's record as soon as it finishes.
	RetainNone time.Duration = -1
)

// finishChunk bounds the transitions one finish.lua call applies (the engine's completer; its
// release chunk is the engine's too).
const finishChunk = 50

// ClientConfig configures a Client. Zero fields take the documented defaults.
type ClientConfig struct {
	// Prefix starts every key. Defaults to "conveyor".
	Prefix string
	// MaxPayloadBytes bounds a job's payload plus its encoded metadata. Defaults to
	// 1 MiB. With Keys it bounds the plaintext: what sealing adds (keyring.Overhead, some
	// 40 bytes) is not counted.
	MaxPayloadBytes int
	// MaxRetries is the retry count of jobs enqueued without WithMaxRetries. Defaults to
	// 5; set NoRetries for none.
	MaxRetries int
	// Retention is how long Cancel keeps a canceled job's record (jobs enqueued WithRetention
	// keep their own). Defaults to 24h; RetainNone deletes it at once.
	Retention time.Duration
	// MinRetention is the shortest time Cancel keeps a canceled job's record (a tombstone
	// with RetainNone). So a publish sent again after a lost reply makes no second job. See
	// WorkerConfig.MinRetention. Defaults to 1m.
	MinRetention time.Duration
	// Now returns the current time; tests may replace it. Defaults to time.Now.
	Now func() time.Time
	// Replicas makes every Enqueue and EnqueueBatch wait until this many replicas have the
	// jobs, as WithReplicas (which overrides it per call) says; ReplicaTimeout bounds the
	// wait (default 1s). Zero waits for none.
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
	// Keys, when set, encrypts at rest: every payload the Client publishes is sealed under the
	// keyring's newest key, bound to its job's id (keyring.Seal), before it leaves the
	// process, and the jobs it reads (Get, Wait) come back with payload and result opened
	// when the keyring has their key. A payload sealed already (an outbox row sealed at its
	// Enqueue) is sent as it is. The type and the metadata stay plain: put no secret in
	// metadata. An empty payload stays empty. Nil: nothing is sealed and reads return what is
	// stored, sealed or not.
	//
	// A job sent again after a key switch (a retry after a lost reply, an outbox row that a
	// relay sent before it died and a rotation re-sealed since) is sealed under another key
	// than its stored copy, so the bytes differ. When that is all that differs, the Client
	// reads the stored job once and opens both: the same plaintext finds the job
	// (Duplicate), another is ErrConflict, and a stored payload under a key this keyring
	// lacks is ErrConflict naming the key (errors.Is keyring.ErrUnknownKey). Without Keys
	// payloads are compared byte for byte, so a relay needs the keys for this.
	Keys *keyring.Keyring
	// KeepSealed makes reads leave payloads and results sealed even with Keys: for a server
	// that opens them per caller (Job.Open), as conveyor serve does for its payload token.
	KeepSealed bool
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
	pub    *publish.Publisher // routes, known queues and the writes of publishes
	waiter clientWaiter       // job events, for Wait
	tracer tracing.Tracer
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
		cfg.MaxRetries = defaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	cfg.Retention = cmp.Or(cfg.Retention, defaultRetention)
	cfg.MinRetention = cmp.Or(cfg.MinRetention, defaultMinRetention)
	cfg.MaxQueues = cmp.Or(cfg.MaxQueues, defaultMaxQueues)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{rdb: rdb, store: jobstate.NewStore(rdb, cfg.Prefix), cfg: cfg, tracer: tracing.New(cfg.TracerProvider)}
	c.pub = publish.New(c.publishConfig())
	return c, nil
}

// publishConfig is the Config of the Client's Publisher: its store and settings, and the
// public errors its errors wrap.
func (c *Client) publishConfig() publish.Config {
	return publish.Config{Store: c.store, Redis: c.rdb, Prefix: c.cfg.Prefix, Now: c.cfg.Now, MaxQueues: c.cfg.MaxQueues,
		AddQueue: func(ctx context.Context, queue string) error {
			return addQueue(ctx, c.store, queue, c.cfg.MaxQueues, c.cfg.RequireQueues)
		},
		Refused: func(err error) bool {
			return errors.Is(err, ErrQueueNotFound) || errors.Is(err, ErrTooManyQueues)
		},
		MaxRetries: maxMaxRetries, MaxTimeout: maxDefaultTimeout, ErrBusy: ErrQueueBusy}
}

// Redis returns the client's Redis connection.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Prefix returns the key prefix.
func (c *Client) Prefix() string { return c.cfg.Prefix }

// Enqueue publishes one job to queue: at once, or later with WithDelay or WithRunAt. It returns
// the job as stored. WithID may name a job that exists, or WithUnique a key that a live job
// holds. Then nothing new is written and that existing job is returned with Duplicate set.
// When the job WithID names has another type or payload, Enqueue refuses with ErrConflict. It
// says what differs, and writes nothing. Under ClientConfig.Keys two sealed payloads are the
// same when they open to the same plaintext, whichever keys sealed them (see Keys). With
// WithDebounce it returns the job of the key's window, scheduled. Debounced is set when the
// publish joined a pending job (see WithDebounce).
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
	j, err := c.enqueue(ctx, queue, &task, pt, opts)
	pt.end([]*Job{j}, err)
	return j, err
}

// enqueue is Enqueue with the publish's tracing (nil for none).
func (c *Client) enqueue(ctx context.Context, queue string, task *Task, pt *publishTrace, opts []Option) (_ *Job, err error) {
	defer func() { err = outOfMemory(err) }()
	if err := validate(queue, ""); err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	var nj jobstate.NewJob
	j, err := c.prepare(queue, task, now, opts, pt.forTask(task), &nj)
	if err != nil {
		return nil, err
	}
	// One read of the queue's route: its partition count and its job defaults together.
	p, d, err := c.pub.Route(ctx, queue, true)
	if err != nil {
		return nil, err
	}
	applyDefaults(d, opts, task, j, &nj)
	c.seal(&nj)
	rw := c.replicasFor(opts, nil).writer(c.rdb) // durable.go
	js := c.store.Via(rw.Scripter(c.rdb))
	bound := c.bound(ctx, d)
	if !nj.Plain(now) || !publish.OneBounded(bound) {
		jobs, err := c.publish(ctx, js, queue, p, []*Job{j}, []jobstate.NewJob{nj}, now, bound)
		if err != nil {
			return nil, err
		}
		return jobs[0], replicated(rw, nil)
	}
	row, err := c.pub.One(ctx, js, queue, p, &nj, now, bound)
	if err != nil {
		return nil, err
	}
	if row.Code == script.Full {
		return nil, c.full(ctx, queue, nj.LimitKey, row, bound, p, 0)
	}
	existed, err := created(j, &nj, row, now)
	switch {
	case existed:
		j, err = c.duplicate(ctx, queue, j)
	case c.resealable(&nj, row):
		j, err = c.sameSealed(ctx, queue, j, &nj, err)
	}
	if err != nil {
		return nil, err
	}
	return j, replicated(rw, nil)
}

// EnqueueBatch publishes many jobs to queue in one round trip. It makes one script call per
// chunk of up to 100 jobs, all chunks pipelined. The opts apply to every task, then each
// task's own Opts. Every task is validated before anything is written, so bad input writes
// nothing. On a Redis error some chunks may have been written. The returned jobs carry their
// ids, and calling again with those ids (WithID) is idempotent.
//
// Jobs that existed already come back with Duplicate set. A task whose id names a job with
// another type or payload (compared as Enqueue does) is not written. Its error (wrapping
// ErrConflict, one per such task) comes back with the other jobs, which were written. In a
// partitioned queue the jobs are grouped by partition, each group chunked as above, all chunks
// still in one pipeline. Tasks with a debounce key (WithDebounce) are one script call each, in
// the batch's order. A later task of a key joins the job of an earlier one, and the last one's
// payload wins.
//
// The jobs carry the trace context of ctx, or of the one publish span the call records under a
// tracer provider, as Enqueue's do.
func (c *Client) EnqueueBatch(ctx context.Context, queue string, tasks []Task, opts ...Option) ([]*Job, error) {
	var pt *publishTrace
	if len(tasks) > 0 {
		ctx, pt = c.startPublish(ctx, queue, nil, tasks)
	}
	jobs, err := c.enqueueBatch(ctx, queue, tasks, pt, opts)
	pt.end(jobs, err)
	return jobs, err
}

// enqueueBatch is EnqueueBatch with the publish's tracing (nil for none).
func (c *Client) enqueueBatch(ctx context.Context, queue string, tasks []Task, pt *publishTrace, opts []Option) (_ []*Job, err error) {
	defer func() { err = outOfMemory(err) }()
	if err := validate(queue, ""); err != nil {
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
	p, d, err := c.pub.Route(ctx, queue, true)
	if err != nil {
		return nil, err
	}
	for i := range tasks {
		applyDefaults(d, opts, &tasks[i], jobs[i], &njs[i])
		c.seal(&njs[i])
	}
	rw := c.replicasFor(opts, tasks).writer(c.rdb) // durable.go
	jobs, err = c.publish(ctx, c.store.Via(rw.Scripter(c.rdb)), queue, p, jobs, njs, now, c.bound(ctx, d))
	return jobs, replicated(rw, err)
}

// publish writes prepared jobs to queue in the layout of p, its partition count as the caller
// read it (publish.Publisher.Publish, which writes again the jobs a closed layout refused).
// It sets on each job what the scripts answered, and reads the jobs that existed already.
// Under a bound (nil: none), a job the queue refused keeps an empty Status, and its error, a
// *QueueFullError, comes back with the others'.
func (c *Client) publish(ctx context.Context, js jobstate.Backend, queue string, p int, jobs []*Job, njs []jobstate.NewJob, now time.Time, bound *jobstate.Bound) ([]*Job, error) {
	var existing []int // a try's jobs that existed, read once its calls all answered
	var fulls []*QueueFullError
	err := c.pub.Publish(ctx, js, queue, p, njs, now, publish.Settle{
		Bound: bound,
		Created: func(i int, row jobstate.Created) error {
			if row.Code == script.Full {
				// Its RetryAfter is set below, once every refusal is known: one read for all.
				f := fullError(queue, njs[i].LimitKey, row, bound, p, i)
				fulls = append(fulls, f)
				return f
			}
			existed, err := created(jobs[i], &njs[i], row, now)
			if existed {
				existing = append(existing, i)
			}
			if c.resealable(&njs[i], row) {
				got, serr := c.sameSealed(ctx, queue, jobs[i], &njs[i], err)
				if serr == nil {
					jobs[i] = got
				}
				return serr
			}
			return err
		},
		Debounced: func(i int, d jobstate.Debounced) { debounced(jobs[i], &njs[i], d) },
		Done: func() error {
			for _, i := range existing {
				got, err := c.duplicate(ctx, queue, jobs[i])
				if err != nil {
					return err
				}
				jobs[i] = got
			}
			existing = existing[:0]
			return nil
		},
	})
	c.fillRetryAfter(ctx, queue, fulls)
	return jobs, err
}

// created sets on job j, published as nj, what enqueue.lua answered. It says whether the job
// existed already (Client.duplicate reads it), and returns the error of a conflict.
func created(j *Job, nj *jobstate.NewJob, row jobstate.Created, now time.Time) (existed bool, err error) {
	switch row.Code {
	case script.OK:
		j.Status, j.Entry, j.EnqueuedAt = publish.Stored(row, nj, now)
	case script.UniqueHeld:
		j.ID = row.Holder
		return true, nil
	case script.Exists:
		return true, nil
	case script.Conflict:
		return false, conflict(j.ID, row.Differs)
	}
	return false, nil
}

// duplicate reads job j, which existed already (or holds j's unique key), marked Duplicate.
// It returns j, so marked, when the job finished and expired in between.
func (c *Client) duplicate(ctx context.Context, queue string, j *Job) (*Job, error) {
	j.Duplicate = true
	got, err := c.Get(ctx, queue, j.ID)
	if errors.Is(err, ErrNotFound) {
		return j, nil // what was asked for
	}
	if err != nil {
		return nil, err
	}
	got.Duplicate = true
	return got, nil
}

// resealable reports whether a publish of nj that enqueue.lua answered with row may have found
// its own job under another key: a conflict on the payload alone, nj's payload sealed, and a
// keyring to open both with (sameSealed). Without keys, nothing changes: a payload sealed by
// someone else (an outbox row) is compared byte for byte, as a plain one is.
func (c *Client) resealable(nj *jobstate.NewJob, row jobstate.Created) bool {
	return row.Code == script.Conflict && row.Differs == "payload" && c.cfg.Keys != nil && keyring.Sealed(nj.Payload)
}

// sameSealed answers a publish of job j, as nj, whose id names a job with another payload
// (resealable); conflict is the error the publish has so far. The synthetic nonce makes one
// plaintext under one key seal to the same bytes, but not under two: a job published under
// the old key and published again under the new one (a retry after a lost reply that spans a
// key switch; an outbox row a relay sent before it died, re-sealed since by outbox.Rotate, or
// its job by Inspector.RotateKeys) differs byte for byte from itself. So it reads the stored
// job, once and on this path alone, and when both payloads are sealed and open to the same
// plaintext it returns that job marked Duplicate, what a publish sent again gets when nothing
// changed. Otherwise it returns conflict, which says so when a payload would not open (a key
// this keyring lacks: the answer then is to list that key, not to change the job). A
// debounced job is left to the byte comparison: its payload is sealed for no job in
// particular, and a debounced publish never conflicts.
func (c *Client) sameSealed(ctx context.Context, queue string, j *Job, nj *jobstate.NewJob, conflict error) (*Job, error) {
	qs, err := c.lookup(ctx, queue, j.ID)
	if err != nil {
		return nil, err
	}
	got, _, err := findJob(ctx, c.store, qs, j.ID, nil) // as stored: opened below
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, conflict // gone since: nothing left to compare with
	case err != nil:
		return nil, err
	case got.Debounce != nil || !keyring.Sealed(got.Payload):
		return nil, conflict
	}
	mine, err := c.cfg.Keys.Open(keyring.Payload, j.ID, nj.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w (the payload published does not open to compare: %w)", conflict, err)
	}
	stored, err := c.cfg.Keys.Open(keyring.Payload, j.ID, got.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w (the stored payload does not open to compare: %w)", conflict, err)
	}
	if !bytes.Equal(mine, stored) {
		return nil, conflict
	}
	if k := c.readKeys(); k != nil {
		got.Payload = stored
		_ = got.Open(k) // its result, when it has one; what does not open stays sealed
	}
	got.Duplicate = true
	return got, nil
}

// debounced sets what debounce.lua answered for job j, published as nj.
func debounced(j *Job, nj *jobstate.NewJob, d jobstate.Debounced) {
	j.ID, j.Status, j.RunAt, j.CreatedAt, j.Version, j.Debounced = d.ID, status.Scheduled, d.RunAt, d.CreatedAt, d.Version, d.Joined
	j.Debounce = &DebounceWindow{Key: nj.Debounce, First: d.CreatedAt, Until: d.Until, Publishes: d.Publishes}
}

// conflict is the error of a publish whose id names a job with another type or payload.
func conflict(id, differs string) error {
	return fmt.Errorf("%w: job %s exists with a different %s", ErrConflict, id, strings.ReplaceAll(differs, ",", " and "))
}

// prepare validates a task and its options, fills nj with what the enqueue script writes and
// returns the job as it will be stored. A non-nil tc is the trace context the job carries
// (startPublish), set over the metadata's own.
func (c *Client) prepare(queue string, t *Task, now time.Time, common []Option, tc map[string]string, nj *jobstate.NewJob) (*Job, error) {
	var o enqueueOptions
	if len(common)+len(t.Opts) > 0 {
		o = applyOptions(common, t.Opts)
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
	md := publish.Metadata(t.Metadata, o.metadata, tc)
	if err := validateMetadata(md); err != nil {
		return nil, err
	}
	encMD, err := stream.EncodeMetadata(md)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if size := payloadLen(t.Payload) + len(encMD); size > c.cfg.MaxPayloadBytes {
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

// payloadLen is what MaxPayloadBytes counts of a payload: the plaintext's length of one sealed
// already (an outbox row's), so that a limit means the same with encryption on.
func payloadLen(p []byte) int {
	if n := keyring.PlainLen(p); n >= 0 {
		return n
	}
	return len(p)
}

// seal seals nj's payload with the Client's keys, once its job id is final. A debounced
// publish's is sealed for no job in particular (keyring.AnyJob): the job it joins is known in
// Redis only. The Job the caller gets back keeps the plaintext it gave.
func (c *Client) seal(nj *jobstate.NewJob) {
	if c.cfg.Keys == nil || len(nj.Payload) == 0 {
		return // an empty payload has nothing to hide
	}
	id := nj.ID
	if nj.Debounce != "" {
		id = keyring.AnyJob
	}
	nj.Payload = c.cfg.Keys.Seal(keyring.Payload, id, nj.Payload)
}

// readKeys is the keyring the Client's reads open jobs with: nil under KeepSealed.
func (c *Client) readKeys() *keyring.Keyring {
	if c.cfg.KeepSealed {
		return nil
	}
	return c.cfg.Keys
}

// applyOptions applies the publish's options, then the task's. Its options escape to the heap
// (an Option is called through a func value): a task with none spares that allocation.
func applyOptions(common, own []Option) enqueueOptions {
	var o enqueueOptions
	for _, opt := range common {
		opt(&o)
	}
	for _, opt := range own {
		opt(&o)
	}
	return o
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

// NewID returns a new job id: a ULID (26 characters, sortable by creation time).
func NewID() string { return ulid.Make().String() }

// Get returns the job's current state, or ErrNotFound. In a partitioned queue it looks in the
// partition the id routes to first, then in the others (one pipeline). So the caller need not
// know where a job published with a unique key went.
func (c *Client) Get(ctx context.Context, queue, id string) (*Job, error) {
	if err := c.checkJob(queue, id); err != nil {
		return nil, err
	}
	qs, err := c.lookup(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	j, _, err := findJob(ctx, c.store, qs, id, c.readKeys())
	return j, err
}

// lookup returns the partitions a read of job id of queue tries, in order
// (publish.LookupOrder): the queue alone unless it is partitioned.
func (c *Client) lookup(ctx context.Context, queue, id string) ([]keys.Queue, error) {
	p, err := c.pub.Partitions(ctx, queue, false)
	if err != nil {
		return nil, err
	}
	if p <= 1 {
		return []keys.Queue{c.pub.Keys(queue)}, nil
	}
	return publish.LookupOrder(c.cfg.Prefix, queue, id, p), nil
}

// jobFromRecord builds job id of queue from its record, its payload and result opened with k
// where k has their key (sealed otherwise: Job.Sealed).
func jobFromRecord(queue, id string, r jobstate.Record, k *keyring.Keyring) (*Job, error) {
	j := &Job{ID: id, Queue: queue, Type: r.Type, Status: status.Status(r.Status), Attempt: r.Attempt,
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
	if k != nil {
		_ = j.Open(k) // what does not open stays sealed, shown as such
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
	qs, err := c.lookup(ctx, queue, id)
	if err != nil {
		return err
	}
	now := c.cfg.Now()
	return publish.OnPartition(ctx, c.store, qs, id, ErrNotFound, func(q keys.Queue) error {
		return cancelJob(ctx, c.store, q, id, now, c.cfg.Retention, c.cfg.MinRetention)
	})
}

// cancelJob cancels job id of q (Client.Cancel and Inspector.Cancel; inspect.Cancel): a
// canceled record is kept for retention, but at least minRetention.
func cancelJob(ctx context.Context, js jobstate.Backend, q keys.Queue, id string, now time.Time, retention, minRetention time.Duration) error {
	return inspect.Cancel(ctx, js, q, id, inspect.CancelParams{Now: now, Retention: retention, MinRetention: minRetention,
		NotCancelable: ErrNotCancelable, NotFound: ErrNotFound})
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
	// Waiting is the gauge of the workflow tasks waiting for the tasks they run after
	// (status.Waiting).
	Waiting int64 `json:"waiting"`
	// LimitWaiting is how many of the Scheduled jobs wait for a slot of a concurrency limit
	// (Limit): deferred, in no set but their limit's wait list, until a slot frees.
	LimitWaiting int64 `json:"limit_waiting"`
	// LatencyMS is the queue's latency: how long, in milliseconds by Redis's clock, the oldest
	// job ready to run (queued in a stream, not yet handed to a worker) has waited there; 0
	// when none waits. Set by the Inspector's Queues and Stats.
	LatencyMS int64 `json:"latency_ms"`
	// WaitingFor counts the jobs that are not running by why they wait (WaitingFor.Kind),
	// the reasons that have any. Set by the Inspector's Queues and Stats; nil from
	// Client.Stats.
	WaitingFor map[status.Reason]int64 `json:"waiting_for,omitempty"`
	// RejectedFull counts the jobs the queue refused at its bound (QueueSettings.MaxWaiting,
	// policy reject: ErrQueueFull); DroppedFull the waiting jobs it canceled at its bound to
	// admit new ones (policy drop-oldest).
	RejectedFull int64 `json:"rejected_full"`
	DroppedFull  int64 `json:"dropped_full"`
}

// Empty reports whether s shows nothing: no job in any place, no count, not paused. A queue
// nobody used reads so, and so does a name with a typo in it.
func (s *QueueStats) Empty() bool {
	c := *s
	// The counts by reason only split the gauges: with every gauge 0 they are empty too.
	c.WaitingFor = nil
	return reflect.DeepEqual(c, QueueStats{Queue: s.Queue})
}

// Stats reads a queue's gauges and counters in one round trip (one per node involved on a
// cluster); a partitioned queue's are the sums over its partitions.
func (c *Client) Stats(ctx context.Context, queue string) (*QueueStats, error) {
	if err := validate(queue, ""); err != nil {
		return nil, err
	}
	p, err := c.pub.Partitions(ctx, queue, false)
	if err != nil {
		return nil, err
	}
	if p <= 1 {
		st, err := c.store.ReadStats(ctx, []keys.Queue{c.pub.Keys(queue)})
		if err != nil {
			return nil, err
		}
		return (*QueueStats)(st[0]), nil
	}
	return queueStats(ctx, c.store, c.cfg.Prefix, queue, p)
}
