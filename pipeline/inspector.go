package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/status"
)

// Page sizes of Inspector.List.
const (
	// defaultPageLimit is the page size of a Page with no Limit.
	defaultPageLimit = 100
	// maxPageLimit bounds a page: a larger Limit is reduced to it, so one call reads at most
	// this many job records.
	maxPageLimit = 1000
	// defaultPageBytes is the byte budget of a Page with no MaxBytes. A page ends with the job
	// whose payload and result bytes, added to those before it, reach it.
	defaultPageBytes = 8 << 20
)

var (
	// ErrQueueBusy is returned by DeleteQueue, unless forced, for a queue that has unfinished
	// jobs: scheduled, queued, or held by a worker.
	ErrQueueBusy = errors.New("pipeline: queue has unfinished jobs")
	// ErrQueueNotFound is returned by DeleteQueue for a queue that is not known and has no keys.
	ErrQueueNotFound = errors.New("pipeline: queue not found")
)

// InspectorConfig configures an Inspector. Zero fields take the documented defaults.
type InspectorConfig struct {
	// Prefix starts every key. Defaults to "conveyor".
	Prefix string
	// Retention is how long Cancel keeps a canceled job's record (jobs enqueued WithRetention
	// keep their own), as ClientConfig.Retention. Defaults to 24h; RetainNone
	// deletes it at once.
	Retention time.Duration
	// MinRetention is the shortest time Cancel keeps a canceled job's record, as
	// ClientConfig.MinRetention. Defaults to 1m.
	MinRetention time.Duration
	// Now returns the current time (the time of a cancel or a replay); tests may replace it.
	// Ages (PurgeAll) are measured by Redis's clock instead. Defaults to time.Now.
	Now func() time.Time
	// MaxQueues bounds the known queues as ClientConfig.MaxQueues does: CreateQueue of a new
	// queue fails with ErrTooManyQueues once there are this many. Defaults to
	// 2,000.
	MaxQueues int
	// MaxSchedules bounds the stored schedules: CreateSchedule of a new schedule fails with
	// ErrTooManySchedules once there are this many. Defaults to 100,000.
	MaxSchedules int
	// Keys opens the payloads and results of the jobs it reads (Get, Find, List and the dry
	// runs) where the keyring has their key; the others stay sealed (Job.Sealed). Nil: jobs
	// come as stored. See ClientConfig.Keys.
	Keys *keyring.Keyring
	// PublishWarningWindow is how far back PublishWarnings looks for a worker that read the
	// queue and handled the types of a publish. Defaults to DefaultPublishWarningWindow (10
	// minutes); at most a day, how long the workers' beats keep what they saw.
	PublishWarningWindow time.Duration
}

func (c InspectorConfig) withDefaults() InspectorConfig {
	c.Prefix = cmp.Or(c.Prefix, keys.DefaultPrefix)
	c.Retention = cmp.Or(c.Retention, defaultRetention)
	c.MinRetention = cmp.Or(c.MinRetention, defaultMinRetention)
	c.MaxQueues = cmp.Or(c.MaxQueues, defaultMaxQueues)
	c.MaxSchedules = cmp.Or(c.MaxSchedules, defaultMaxSchedules)
	c.PublishWarningWindow = cmp.Or(c.PublishWarningWindow, DefaultPublishWarningWindow)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate checks a config that withDefaults filled in (see WorkerConfig.validate for the
// convention).
func (c InspectorConfig) validate() error {
	var errs []error
	if c.Retention < 0 && c.Retention != RetainNone {
		errs = append(errs, invalid("retention %s is negative (RetainNone keeps nothing)", c.Retention))
	}
	if c.MinRetention < 0 {
		errs = append(errs, invalid("min retention %s is negative", c.MinRetention))
	}
	if c.MaxQueues < 0 {
		errs = append(errs, invalid("max queues %d is negative", c.MaxQueues))
	}
	if c.MaxSchedules < 0 {
		errs = append(errs, invalid("max schedules %d is negative", c.MaxSchedules))
	}
	if c.PublishWarningWindow < 0 || c.PublishWarningWindow > engine.SightingsKept {
		errs = append(errs, invalid("publish warning window %s is outside 0..%s (how long the workers' beats keep what they saw)",
			c.PublishWarningWindow, engine.SightingsKept))
	}
	return errors.Join(errs...)
}

// Inspector is Conveyor's administration API: it lists queues and their jobs by status, reads
// and cancels jobs, replays and purges dead jobs and deletes queues. The CLI, the HTTP API and
// the metrics collector are built on it; so can a user's own tools. It is safe for concurrent
// use.
//
// Every call is bounded in the work it asks of Redis. No KEYS, and no SCAN but DeleteQueue's
// (over the queue's own node). At most 1,000 job records are read per List call.
type Inspector struct {
	rdb   redis.UniversalClient
	store jobstate.Backend
	cfg   InspectorConfig
	eng   *inspect.Engine // listing, dead jobs, stats and deletion
}

// NewInspector returns an Inspector over rdb (a standalone, cluster or failover client), or
// the error, wrapping ErrInvalid, of a config with an unusable value (a negative retention,
// say).
func NewInspector(rdb redis.UniversalClient, cfg InspectorConfig) (*Inspector, error) {
	if rdb == nil {
		panic("pipeline: NewInspector with a nil Redis client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	i := &Inspector{rdb: rdb, store: jobstate.NewStore(rdb, cfg.Prefix), cfg: cfg}
	i.eng = inspect.New(i.store, inspect.Config{Now: cfg.Now, Partitions: i.partitions, ClosedTTL: jobstate.ClosedTTL,
		Errs: inspect.Errors{Invalid: ErrInvalid, NotFound: ErrNotFound, NotDead: ErrNotDead,
			UniqueHeld: ErrUniqueHeld, QueueBusy: ErrQueueBusy, QueueNotFound: ErrQueueNotFound}})
	return i, nil
}

// check validates a queue name and, unless empty, a job id.
func (i *Inspector) check(queue, id string) error { return validate(queue, id) }

func (i *Inspector) keys(queue string) keys.Queue { return keys.New(i.cfg.Prefix, queue) }

// partitions returns every partition of queue, in partition order.
func (i *Inspector) partitions(ctx context.Context, queue string) ([]keys.Queue, error) {
	p, err := jobstate.PartitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	return jobstate.PartitionKeys(i.cfg.Prefix, queue, p), nil
}

// lookup returns the partitions of queue in the order a lookup of id tries them.
func (i *Inspector) lookup(ctx context.Context, queue, id string) ([]keys.Queue, error) {
	p, err := jobstate.PartitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	return publish.LookupOrder(i.cfg.Prefix, queue, id, p), nil
}

// Queues returns the gauges and counters of every known queue (every queue something was
// enqueued to or a worker read), sorted by name. It reads them in one pipeline per 100
// queues: one round trip each on a standalone server, one per node involved on a cluster. The
// latencies (QueueStats.LatencyMS) of the queues with queued jobs are one more such pipeline
// per 100 queues.
func (i *Inspector) Queues(ctx context.Context) ([]*QueueStats, error) {
	st, err := i.eng.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := statsOf(st)
	if err := i.countReasons(ctx, out...); err != nil {
		return nil, err
	}
	return out, nil
}

// Stats reads a queue's gauges and counters in one round trip (one per node involved on a
// cluster), and its latency, when it has queued jobs, in one more; a partitioned queue's are the sums over its
// partitions, its latency their largest. A queue nothing was ever enqueued to has all zeros.
func (i *Inspector) Stats(ctx context.Context, queue string) (*QueueStats, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	st, err := i.eng.Stats(ctx, queue)
	if err != nil {
		return nil, err
	}
	out := (*QueueStats)(st)
	if err := i.countReasons(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Get returns the job's current state, or ErrNotFound, as Client.Get (in any partition).
func (i *Inspector) Get(ctx context.Context, queue, id string) (*Job, error) {
	if err := i.checkJob(queue, id); err != nil {
		return nil, err
	}
	qs, err := i.lookup(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	k, rec, err := publish.Find(ctx, i.store, qs, id)
	if err != nil || k < 0 {
		return nil, cmp.Or(err, ErrNotFound)
	}
	j, err := jobFromRecord(qs[k].Name(), id, rec, i.cfg.Keys)
	if err != nil {
		return nil, err
	}
	if err := i.explain(ctx, j.Queue, []*Job{j}, []*jobstate.Record{&rec}, qs[k:k+1]); err != nil {
		return nil, err
	}
	return j, nil
}

// Find looks job id up in every known queue, when the caller does not know its queue. It asks
// first which queues hold a record of that id (EXISTS). On a standalone server that is
// narrowed over chunks of queues; on a cluster it is one per queue in one pipeline. Then the
// job is read from the first of them. It returns the job (its Queue says where it was found)
// and the queues it searched, sorted; ErrNotFound when no queue has it. Ids are unique per
// queue only. When several queues have a job of that id, it returns the one in the first
// queue by name; Get with a queue picks another.
func (i *Inspector) Find(ctx context.Context, id string) (*Job, []string, error) {
	if err := keys.ValidateID(id); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r, searched, err := i.eng.Find(ctx, id)
	if err != nil {
		return nil, searched, err
	}
	j, err := jobFromRecord(r.Queue, id, r.Rec, i.cfg.Keys)
	if err != nil {
		return nil, searched, err
	}
	if err := i.explain(ctx, r.Queue, []*Job{j}, []*jobstate.Record{&r.Rec}, []keys.Queue{r.Part}); err != nil {
		return nil, searched, err
	}
	return j, searched, nil
}

// Cancel cancels a job that has not finished, as Client.Cancel: it returns ErrNotCancelable
// for a finished job and ErrNotFound for an unknown one.
func (i *Inspector) Cancel(ctx context.Context, queue, id string) error {
	now := i.cfg.Now()
	return i.onJob(ctx, queue, id, func(q keys.Queue) error {
		return cancelJob(ctx, i.store, q, id, now, i.cfg.Retention, i.cfg.MinRetention)
	})
}

// ---- Listing ----

// Page selects a page of List: the Cursor of the previous page's JobPage.Next (empty for the
// first page) and at most Limit jobs (0: 100; more than 1,000:
// 1,000; negative: ErrInvalid).
type Page struct {
	Cursor string
	Limit  int
	// MaxBytes is the page's byte budget. The page ends early, its Next right after it, with
	// the job whose payload and result bytes, added to those of the jobs before it, reach
	// MaxBytes. So a job larger than the whole budget still makes a page of its own, and a
	// listing always moves on. 0: 8 MiB; negative: ErrInvalid.
	MaxBytes int64
}

// JobPage is one page of List.
type JobPage struct {
	// Jobs are the page's jobs, in the listing's order.
	Jobs []*Job
	// Leases, for a page of in_progress jobs, holds each job's lease by job id.
	Leases map[string]Lease
	// Next is the cursor of the next page; empty when this page is the last.
	Next string
}

// Lease is a running job's hold on its stream entry, as the consumer group's pending entries
// list records it.
type Lease struct {
	// Entry is the stream entry the worker holds.
	Entry string
	// Worker is the worker (its consumer name) that holds the entry.
	Worker string
	// Idle is how long ago the worker last renewed its lease (or was handed the entry). A live
	// worker renews every third of its visibility timeout. An idle time past the visibility
	// timeout means the worker is gone and recovery will put the job back.
	Idle time.Duration
	// Deliveries counts the times the entry was handed to a worker (renewals do not count).
	Deliveries int64
}

type leaseJSON struct {
	Entry      string `json:"entry"`
	Worker     string `json:"worker"`
	IdleMS     int64  `json:"idle_ms"`
	Deliveries int64  `json:"deliveries"`
}

// MarshalJSON writes the lease with its idle time in milliseconds (idle_ms).
func (l Lease) MarshalJSON() ([]byte, error) {
	return json.Marshal(leaseJSON{Entry: l.Entry, Worker: l.Worker, IdleMS: l.Idle.Milliseconds(), Deliveries: l.Deliveries})
}

// MarshalJSON writes {"jobs": [...], "next": "...", "leases": {...}}: each job as Job's own
// JSON (the CLI's `status --json`), jobs an empty array rather than null, leases only for a
// page of in_progress jobs.
func (p *JobPage) MarshalJSON() ([]byte, error) {
	jobs := p.Jobs
	if jobs == nil {
		jobs = []*Job{}
	}
	return json.Marshal(struct {
		Jobs   []*Job           `json:"jobs"`
		Next   string           `json:"next"`
		Leases map[string]Lease `json:"leases,omitempty"`
	}{jobs, p.Next, p.Leases})
}

// List returns a page of the jobs of queue that have status: exactly the jobs its gauge in
// QueueStats counts. For each status:
//
//   - status.Waiting: the workflow tasks waiting for their dependencies, earliest published
//     first. The cursor is "<publish unix ms>:<id>".
//   - status.Scheduled: the scheduled set by due time, earliest first. A job due already but
//     not yet promoted is still listed. The cursor is "<due unix ms>:<id>". Then the jobs
//     waiting for a concurrency limit's slot (QueueStats.LimitWaiting), each limit scope's in
//     the order they are woken, with the cursor "lw:<the scope, base64url>:<position>".
//   - status.Queued: the stream's entries, in stream order, that no worker was handed yet.
//     Those are after the consumer group's last-delivered id, less any that are pending. The
//     cursor is the last entry id seen. Then the jobs waiting for a place in their fair group
//     (QueueStats.GroupWaiting), each group's in its order, with the cursor
//     "gw:<the group, base64url>:<position>". A position moves as the list's first jobs leave
//     it, so a job may be missed or seen twice by a listing that goes on meanwhile.
//   - status.InProgress: the group's pending entries list in entry order. Each job's Worker is
//     the worker that holds it now, Attempt the attempt it runs, Entry the entry it holds.
//     JobPage.Leases has its lease (idle time since the last renewal). A job a worker was
//     just handed is listed here before the worker records its start. The cursor is the last
//     entry id seen.
//   - status.Failed (or "dead", its alias: status.Parse): the dead set, newest death first. The
//     cursor is "<death unix ms>:<id>".
//   - status.Completed, status.Canceled: the queue's index of completed (or canceled) jobs,
//     newest first, while their records are retained. The cursor is "<unix ms>:<id>". The
//     index keeps the jobs of the queue's default retention. A job kept longer by its own
//     WithRetention leaves the listing sooner, and is still found by id. The index keeps at
//     most keys.FinishedIndexCap (10,000) a partition, the newest. A job kept only as a
//     tombstone (RetainNone) is not indexed.
//
// An unknown status returns ErrInvalid, as does a cursor that is not one of this status's.
//
// A page holds at most Page.Limit jobs. It ends early at its byte budget: Page.MaxBytes of
// payload and result bytes, 8 MiB by default. Its Next is then the job after the
// last one it holds. So 300 dead jobs of 1 MB are 8 pages of 8 MB by default, not one of 300
// MB. Only what the page holds is read. A sorted set's page learns its jobs' sizes first
// (HSTRLEN, no payload read). A stream's (queued, in_progress) reads entries in chunks of 16
// at first, then as many as the budget's rest fits at the sizes seen.
//
// A page costs Redis at most Page.Limit job records, besides the index it pages through. The
// records are read in one pipelined round trip, or one script for in_progress. The index read
// starts at the cursor (O(log N)). Pages are not a snapshot. A job that changes status while
// a listing goes on may be missed or seen in two statuses. A job seen in the index but gone or
// moved on when its record is read is left out. So a page may hold fewer than Limit jobs, even
// none, before the end. Only an empty Next means the end. A page carries the jobs' payloads:
// size Limit for them.
//
// A partitioned queue is listed partition after partition, each in the order above. So the
// order holds within a partition, not across them, and a page may span partitions. Its cursor
// is "<partition>/<the partition's cursor>".
func (i *Inspector) List(ctx context.Context, queue string, st status.Status, page Page) (*JobPage, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	limit := page.Limit
	switch {
	case limit < 0:
		return nil, invalid("page limit %d is negative", limit)
	case limit == 0:
		limit = defaultPageLimit
	case limit > maxPageLimit:
		limit = maxPageLimit
	}
	if page.MaxBytes < 0 {
		return nil, invalid("page byte budget %d is negative", page.MaxBytes)
	}
	st = status.Parse(string(st)) // "dead" is failed's word
	if !st.Listable() {
		return nil, invalid("unknown status %q: want %s", st, orList(status.Listable()))
	}
	p, err := i.eng.List(ctx, queue, st, page.Cursor, limit, cmp.Or(page.MaxBytes, defaultPageBytes))
	if err != nil {
		return nil, err
	}
	jp, err := pageOf(p, i.cfg.Keys)
	if err == nil {
		err = i.explainRows(ctx, queue, st, jp, p.Rows)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s jobs of %s: %w", st, queue, err)
	}
	return jp, nil
}

// ---- Dead jobs ----

// Replay moves a dead job back into the stream for a fresh set of attempts. A job published
// WithUnique takes its key again. It returns ErrNotDead for a job that is not in the dead set,
// and ErrNotFound for an unknown id. It returns ErrUniqueHeld when another job holds the
// job's unique key. It returns ErrInvalid for the dead record of an unreadable stream entry,
// which has no type to run.
func (i *Inspector) Replay(ctx context.Context, queue, id string) error {
	return i.onJob(ctx, queue, id, func(q keys.Queue) error { return i.eng.Replay(ctx, q, id) })
}

// ReplayAll replays every job that is in queue's dead set when it starts, oldest death first,
// 100 per round trip, and returns how many it replayed. Jobs that die while it runs are left
// for the next call (so a job that dies again at once is not replayed in a loop). Dead records
// that cannot run again (ErrInvalid: no type; ErrUniqueHeld) stay in the dead set; the error
// then counts them and names a few, and wraps their errors. A partitioned queue's partitions
// are replayed one after the other.
func (i *Inspector) ReplayAll(ctx context.Context, queue string) (int, error) {
	if err := i.check(queue, ""); err != nil {
		return 0, err
	}
	return i.eng.ReplayAll(ctx, queue)
}

// Purge deletes the given dead jobs of queue and returns how many it deleted. A job that is
// not dead is refused with ErrNotDead and left as it is; an unknown id with ErrNotFound. The
// other jobs are deleted all the same, and the error joins one error per refused id. Bad ids
// (ErrInvalid) delete nothing.
func (i *Inspector) Purge(ctx context.Context, queue string, ids ...string) (int, error) {
	if err := i.check(queue, ""); err != nil {
		return 0, err
	}
	var uniq []string
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if err := validateJob(queue, id); err != nil {
			return 0, err
		}
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	if len(uniq) == 0 {
		return 0, nil
	}
	return i.eng.Purge(ctx, queue, uniq)
}

// PurgeAll deletes the dead jobs of queue that died at least olderThan ago (0: all of them), 500
// per script call, and returns how many. Age is measured by Redis's clock, not the caller's.
// A partitioned queue's partitions are purged one after the other.
func (i *Inspector) PurgeAll(ctx context.Context, queue string, olderThan time.Duration) (int, error) {
	if err := i.check(queue, ""); err != nil {
		return 0, err
	}
	return i.eng.PurgeAll(ctx, queue, olderThan)
}

// ---- Queues ----

// DeleteQueue deletes every key of queue (its stream, scheduled and dead sets, job records,
// counters, unique keys and lock) and removes it from the known queues. Unless force is true,
// it refuses with ErrQueueBusy, deleting nothing, while the queue has unfinished or dead
// jobs. Unfinished means scheduled, queued, or held by a worker. Dead jobs failed for good
// and are kept for a replay: deleting them loses them. Finished records do not count. It
// returns ErrQueueNotFound for a queue that is neither known nor has any key.
//
// The keys are found with SCAN pages (1000 keys a page) and unlinked a page at a time. The
// scan covers "prefix:{queue}:*" on the one node that holds the queue's hash slot (every node
// of a Ring). It also covers "prefix:{queue#*" on every master: the keys of every partition of
// every count the queue had. A change of the count leaves empty streams behind. Its partition
// count goes with it; a queue made again later has one partition unless CreateQueue says more.
// It is not atomic with what else runs, so stop the queue's producers and workers first.
// Otherwise a job published meanwhile may be deleted half-way, and a worker recreates the
// stream it reads.
//
// Live workers that read the queue do not make it refuse. QueueReaders names them, and the
// CLI and the API warn with it after the deletion. Such a worker's blocked read ends (Redis
// says the stream no longer exists). It makes the stream and its consumer group again, empty,
// and logs that once at info. It runs any job published to the queue afterwards. Refusing on
// the heartbeat alone would be wrong both ways. A worker without one (DisableHeartbeat, an
// older version) is invisible, and a killed worker's record lingers for three beats. And
// force already means "drop the unfinished jobs", which a caller who stops the workers next
// does not mean. So deleting a read queue works, and says who still reads it.
func (i *Inspector) DeleteQueue(ctx context.Context, queue string, force bool) error {
	if err := i.check(queue, ""); err != nil {
		return err
	}
	relayout, err := i.eng.DeleteQueue(ctx, queue, force)
	if relayout {
		publish.Relayout()
	}
	return err
}
