package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

// Page sizes of Inspector.List.
const (
	// DefaultPageLimit is the page size of a Page with no Limit.
	DefaultPageLimit = 100
	// MaxPageLimit bounds a page: a larger Limit is reduced to it, so one call reads at most
	// this many job records.
	MaxPageLimit = 1000
	// DefaultPageBytes is the byte budget of a Page with no MaxBytes. A page ends with the job
	// whose payload and result bytes, added to those before it, reach it.
	DefaultPageBytes = 8 << 20
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
	// keep their own), as ClientConfig.Retention. Defaults to DefaultRetention; RetainNone
	// deletes it at once.
	Retention time.Duration
	// MinRetention is the shortest time Cancel keeps a canceled job's record, as
	// ClientConfig.MinRetention. Defaults to DefaultMinRetention.
	MinRetention time.Duration
	// Now returns the current time (the time of a cancel or a replay); tests may replace it.
	// Ages (PurgeAll) are measured by Redis's clock instead. Defaults to time.Now.
	Now func() time.Time
	// MaxQueues bounds the known queues as ClientConfig.MaxQueues does: CreateQueue of a new
	// queue fails with ErrTooManyQueues once there are this many. Defaults to
	// DefaultMaxQueues.
	MaxQueues int
	// MaxSchedules bounds the stored schedules: CreateSchedule of a new schedule fails with
	// ErrTooManySchedules once there are this many. Defaults to DefaultMaxSchedules.
	MaxSchedules int
}

func (c InspectorConfig) withDefaults() InspectorConfig {
	c.Prefix = cmp.Or(c.Prefix, keys.DefaultPrefix)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.MinRetention = cmp.Or(c.MinRetention, DefaultMinRetention)
	c.MaxQueues = cmp.Or(c.MaxQueues, DefaultMaxQueues)
	c.MaxSchedules = cmp.Or(c.MaxSchedules, DefaultMaxSchedules)
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
	return errors.Join(errs...)
}

// Inspector is Conveyor's administration API: it lists queues and their jobs by status, reads
// and cancels jobs, replays and purges dead jobs and deletes queues. The CLI, the HTTP API and
// the metrics collector are built on it; so can a user's own tools. It is safe for concurrent
// use.
//
// Every call is bounded in the work it asks of Redis. No KEYS, and no SCAN but DeleteQueue's
// (over the queue's own node). At most MaxPageLimit job records are read per List call.
type Inspector struct {
	rdb   redis.UniversalClient
	store jobstate.Backend
	cfg   InspectorConfig
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
	return &Inspector{rdb: rdb, store: jobstate.NewStore(rdb, cfg.Prefix), cfg: cfg}, nil
}

// check validates a queue name and, unless empty, a job id.
func (i *Inspector) check(queue, id string) error { return validate(queue, id) }

func (i *Inspector) keys(queue string) keys.Queue { return keys.New(i.cfg.Prefix, queue) }

// partitions returns every partition of queue, in partition order.
func (i *Inspector) partitions(ctx context.Context, queue string) ([]keys.Queue, error) {
	p, err := partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	return allPartitions(i.cfg.Prefix, queue, p), nil
}

// lookup returns the partitions of queue in the order a lookup of id tries them.
func (i *Inspector) lookup(ctx context.Context, queue, id string) ([]keys.Queue, error) {
	p, err := partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	return lookupOrder(i.cfg.Prefix, queue, id, p), nil
}

// statsChunk bounds the queues whose stats one pipeline reads.
const statsChunk = 100

// Queues returns the gauges and counters of every known queue (every queue something was
// enqueued to or a worker read), sorted by name. It reads them in one pipeline per 100
// queues: one round trip each on a standalone server, one per node involved on a cluster.
func (i *Inspector) Queues(ctx context.Context) ([]*QueueStats, error) {
	names, counts, paused, err := jobstate.KnownQueuesPaused(ctx, i.rdb, i.cfg.Prefix)
	if err != nil {
		return nil, err
	}
	// Every partition of every queue, chunked: a partitioned queue's partitions are summed.
	var qs []keys.Queue
	for _, n := range names {
		qs = append(qs, allPartitions(i.cfg.Prefix, n, counts[n])...)
	}
	parts := make([]*QueueStats, 0, len(qs))
	for chunk := range slices.Chunk(qs, statsChunk) {
		st, err := readStats(ctx, i.store, chunk)
		if err != nil {
			return nil, err
		}
		parts = append(parts, st...)
	}
	out := make([]*QueueStats, 0, len(names))
	for _, n := range names {
		p := max(1, counts[n])
		st := sumStats(n, parts[:p])
		st.Paused = paused[n]
		out = append(out, st)
		parts = parts[p:]
	}
	return out, nil
}

// Stats reads a queue's gauges and counters in one round trip (one per node involved on a
// cluster); a partitioned queue's are the sums over its partitions. A queue nothing was ever
// enqueued to has all zeros.
func (i *Inspector) Stats(ctx context.Context, queue string) (*QueueStats, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	p, err := partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return nil, err
	}
	st, err := queueStats(ctx, i.store, i.cfg.Prefix, queue, p)
	if err != nil {
		return nil, err
	}
	if st.Paused, err = jobstate.IsPausedQueue(ctx, i.rdb, i.cfg.Prefix, queue); err != nil {
		return nil, fmt.Errorf("read whether queue %s is paused: %w", queue, err)
	}
	return st, nil
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
	j, _, err := findJob(ctx, i.store, qs, id)
	return j, err
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
	names, counts, err := knownQueues(ctx, i.store)
	if err != nil {
		return nil, nil, err
	}
	var lookups []jobstate.Lookup
	for _, name := range names {
		for _, q := range lookupOrder(i.cfg.Prefix, name, id, counts[name]) {
			lookups = append(lookups, jobstate.Lookup{Queue: q, ID: id})
		}
	}
	searched := names
	if len(lookups) == 0 {
		return nil, searched, ErrNotFound
	}
	k, rec, err := i.store.FindFirst(ctx, lookups)
	if err != nil {
		return nil, searched, fmt.Errorf("find %s: %w", id, err)
	}
	if k < 0 {
		return nil, searched, ErrNotFound
	}
	// A partition's Name is its queue's.
	j, err := jobFromRecord(lookups[k].Queue.Name(), id, rec)
	return j, searched, err
}

// Cancel cancels a job that has not finished, as Client.Cancel: it returns ErrNotCancelable
// for a finished job and ErrNotFound for an unknown one.
func (i *Inspector) Cancel(ctx context.Context, queue, id string) error {
	if err := i.checkJob(queue, id); err != nil {
		return err
	}
	qs, err := i.lookup(ctx, queue, id)
	if err != nil {
		return err
	}
	now := i.cfg.Now()
	return onPartition(ctx, i.store, qs, id, func(q keys.Queue) error {
		return cancelJob(ctx, i.store, q, id, now, i.cfg.Retention, i.cfg.MinRetention)
	})
}

// ---- Listing ----

// Page selects a page of List: the Cursor of the previous page's JobPage.Next (empty for the
// first page) and at most Limit jobs (0: DefaultPageLimit; more than MaxPageLimit:
// MaxPageLimit; negative: ErrInvalid).
type Page struct {
	Cursor string
	Limit  int
	// MaxBytes is the page's byte budget. The page ends early, its Next right after it, with
	// the job whose payload and result bytes, added to those of the jobs before it, reach
	// MaxBytes. So a job larger than the whole budget still makes a page of its own, and a
	// listing always moves on. 0: DefaultPageBytes; negative: ErrInvalid.
	MaxBytes int64
}

// pageBudget is what is left of a page's byte budget (Page.MaxBytes) while List fills it.
type pageBudget struct{ left int64 }

// spent reports that the page is full by bytes: no further job goes in.
func (b *pageBudget) spent() bool { return b.left <= 0 }

// take counts n bytes of a job that went into the page.
func (b *pageBudget) take(n int64) { b.left -= n }

// jobBytes is what a job costs a page's budget: its payload and result.
func jobBytes(j *Job) int64 { return int64(len(j.Payload) + len(j.Result)) }

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

// List returns a page of the jobs of queue that have status. For each status:
//
//   - StatusScheduled: the scheduled set by due time, earliest first. A job due already but
//     not yet promoted is still listed. The cursor is "<due unix ms>:<id>".
//   - StatusQueued: the stream's entries, in stream order, that no worker was handed yet.
//     Those are after the consumer group's last-delivered id, less any that are pending. The
//     cursor is the last entry id seen.
//   - StatusInProgress: the group's pending entries list in entry order. Each job's Worker is
//     the worker that holds it now, Attempt the attempt it runs, Entry the entry it holds.
//     JobPage.Leases has its lease (idle time since the last renewal). A job a worker was
//     just handed is listed here before the worker records its start. The cursor is the last
//     entry id seen.
//   - StatusFailed (or "dead", its alias: ParseStatus): the dead set, newest death first. The
//     cursor is "<death unix ms>:<id>".
//   - StatusCompleted, StatusCanceled: the queue's index of completed (or canceled) jobs,
//     newest first, while their records are retained. The cursor is "<unix ms>:<id>". The
//     index keeps the jobs of the queue's default retention. A job kept longer by its own
//     WithRetention leaves the listing sooner, and is still found by id. The index keeps at
//     most keys.FinishedIndexCap (10,000) a partition, the newest. A job kept only as a
//     tombstone (RetainNone) is not indexed.
//
// An unknown status returns ErrInvalid, as does a cursor that is not one of this status's.
//
// A page holds at most Page.Limit jobs. It ends early at its byte budget: Page.MaxBytes of
// payload and result bytes, DefaultPageBytes by default. Its Next is then the job after the
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
func (i *Inspector) List(ctx context.Context, queue string, status Status, page Page) (*JobPage, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	limit := page.Limit
	switch {
	case limit < 0:
		return nil, invalid("page limit %d is negative", limit)
	case limit == 0:
		limit = DefaultPageLimit
	case limit > MaxPageLimit:
		limit = MaxPageLimit
	}
	if page.MaxBytes < 0 {
		return nil, invalid("page byte budget %d is negative", page.MaxBytes)
	}
	bud := &pageBudget{left: cmp.Or(page.MaxBytes, DefaultPageBytes)}
	status = ParseStatus(string(status)) // "dead" is failed's word
	switch status {
	case StatusScheduled, StatusFailed, StatusQueued, StatusInProgress, StatusCompleted, StatusCanceled:
	case StatusWaiting:
		// Waiting tasks are in no set of the queue: their workflow lists them.
		return nil, invalid("waiting tasks are listed by their workflow (Inspector.Workflow, conveyor workflows get), not by status")
	default:
		return nil, invalid("unknown status %q: want %s, %s, %s, %s, %s or %s", status,
			StatusScheduled, StatusQueued, StatusInProgress, StatusFailed, StatusCompleted, StatusCanceled)
	}
	// A malformed cursor is the caller's mistake whether or not Redis answers. Refuse it
	// before reading the partition count (which says which of the two forms it must be).
	if !cursorShape(status, page.Cursor) {
		return nil, invalid("cursor %q is not one of a %s listing", page.Cursor, status)
	}
	qs, err := i.partitions(ctx, queue)
	if err != nil {
		return nil, err
	}
	var p *JobPage
	if len(qs) == 1 {
		p, err = i.listOne(ctx, qs[0], status, page.Cursor, limit, bud)
	} else {
		p, err = i.listPartitions(ctx, qs, status, page.Cursor, limit, bud)
	}
	if err != nil && !errors.Is(err, ErrInvalid) {
		err = fmt.Errorf("list %s jobs of %s: %w", status, queue, err)
	}
	return p, err
}

// cursorShape reports whether cursor can be one of a status listing's. For a plain queue that
// is "<unix ms>:<job id>" or a stream entry id. For a partitioned one it is "<partition>/" and
// one of those, or nothing. listOne and listPartitions check the form the queue needs.
func cursorShape(status Status, cursor string) bool {
	if num, rest, ok := strings.Cut(cursor, "/"); ok {
		if n, err := strconv.Atoi(num); err != nil || n < 0 || strconv.Itoa(n) != num {
			return false
		}
		cursor = rest
	}
	if cursor == "" {
		return true
	}
	switch status {
	case StatusScheduled, StatusFailed, StatusCompleted, StatusCanceled:
		s, id, _ := strings.Cut(cursor, ":")
		_, err := strconv.ParseInt(s, 10, 64)
		return err == nil && keys.ValidID(id)
	default:
		_, inner, ok := cutLevelCursor(cursor)
		if !ok {
			return false
		}
		if inner == "" {
			return true
		}
		_, ok = parseEntryID(inner)
		return ok
	}
}

// listOne is List of one queue or partition.
func (i *Inspector) listOne(ctx context.Context, q keys.Queue, status Status, cursor string, limit int, bud *pageBudget) (*JobPage, error) {
	switch status {
	case StatusScheduled, StatusFailed, StatusCompleted, StatusCanceled:
		return i.listSet(ctx, q, status, cursor, limit, bud)
	case StatusQueued:
		return i.listLevels(ctx, q, cursor, limit, bud, bud.chunked(i.listQueued))
	default:
		return i.listLevels(ctx, q, cursor, limit, bud, bud.chunked(i.listInProgress))
	}
}

// listFunc lists a page of one stream (a level of a queue or partition) from cursor.
type listFunc func(ctx context.Context, q keys.Queue, cursor string, limit int) (*JobPage, error)

// streamChunk is the first read of a stream listing under a byte budget. Entries carry their
// payloads, so a stream is read a chunk at a time and the page cut at the budget.
const streamChunk = 16

// chunked is list read a chunk at a time, the page cut at the budget. Its Next is then the
// entry of the last job it holds (a stream cursor is the last entry seen). The first chunk is
// streamChunk entries. Each next one is as many as the rest of the budget fits at the mean
// size seen. So small jobs take one or two reads, and big ones never many more than fit.
func (b *pageBudget) chunked(list listFunc) listFunc {
	return func(ctx context.Context, q keys.Queue, cursor string, limit int) (*JobPage, error) {
		out := &JobPage{}
		var seen, bytes int64
		n := min(limit, streamChunk)
		for {
			p, err := list(ctx, q, cursor, n)
			if err != nil {
				return nil, err
			}
			for _, j := range p.Jobs {
				if len(out.Jobs) > 0 && b.spent() {
					out.Next = out.Jobs[len(out.Jobs)-1].Entry
					return out, nil
				}
				out.Jobs = append(out.Jobs, j)
				if l, ok := p.Leases[j.ID]; ok {
					if out.Leases == nil {
						out.Leases = map[string]Lease{}
					}
					out.Leases[j.ID] = l
				}
				b.take(jobBytes(j))
				seen, bytes = seen+1, bytes+jobBytes(j)
			}
			if p.Next == "" || b.spent() || len(out.Jobs) >= limit {
				out.Next = p.Next
				return out, nil
			}
			cursor = p.Next
			rest := limit - len(out.Jobs)
			if seen == 0 || bytes == 0 {
				n = rest
			} else {
				n = int(min(int64(rest), max(streamChunk, b.left/max(1, bytes/seen)+1)))
			}
		}
	}
}

// listLevels is a listing of stream entries (queued, in progress) of one queue or partition.
// It goes through the streams of its priority levels in level order, the order workers read
// them. Its list func lists one level's stream (a keys.Queue.AtLevel view). A cursor in a
// level above 1 is "p<level>:" and the level's own cursor (nothing: from the level's start).
// A level-1 cursor is the stream's own, as for a queue that never had levels.
func (i *Inspector) listLevels(ctx context.Context, q keys.Queue, cursor string, limit int, bud *pageBudget, list listFunc) (*JobPage, error) {
	level, inner, ok := cutLevelCursor(cursor)
	if !ok {
		return nil, invalid("cursor %q is not one of a stream listing", cursor)
	}
	found, err := jobstate.QueueLevels(ctx, i.rdb, []keys.Queue{q})
	if err != nil {
		return nil, err
	}
	levels := append([]int{MinPriority}, found[0]...)
	out := &JobPage{}
	for _, l := range levels {
		if l < level {
			continue
		}
		if l > level {
			inner = ""
		}
		if len(out.Jobs) >= limit || bud.spent() {
			out.Next = levelCursor(l, "")
			return out, nil
		}
		p, err := list(ctx, q.AtLevel(l), inner, limit-len(out.Jobs))
		if err != nil {
			return nil, err
		}
		out.add(p)
		if p.Next != "" {
			out.Next = levelCursor(l, p.Next)
			return out, nil
		}
	}
	return out, nil
}

// add appends the jobs and leases of p, a page of a part of a listing, to the listing's page.
func (out *JobPage) add(p *JobPage) {
	out.Jobs = append(out.Jobs, p.Jobs...)
	if p.Leases != nil {
		if out.Leases == nil {
			out.Leases = make(map[string]Lease, len(p.Leases))
		}
		maps.Copy(out.Leases, p.Leases)
	}
}

// levelCursor is the cursor of listLevels at level (see there).
func levelCursor(level int, inner string) string {
	if level <= MinPriority {
		return inner
	}
	return "p" + strconv.Itoa(level) + ":" + inner
}

// cutLevelCursor reads a cursor of listLevels: the level and the level's own cursor.
func cutLevelCursor(cursor string) (level int, inner string, ok bool) {
	rest, found := strings.CutPrefix(cursor, "p")
	if !found {
		return MinPriority, cursor, true
	}
	num, inner, ok := strings.Cut(rest, ":")
	level, err := strconv.Atoi(num)
	if !ok || err != nil || level <= MinPriority || level > MaxPriority || strconv.Itoa(level) != num {
		return 0, "", false
	}
	return level, inner, true
}

// listPartitions is List of a partitioned queue: it fills the page from partition after
// partition, starting where the cursor "<partition>/<cursor>" says.
func (i *Inspector) listPartitions(ctx context.Context, qs []keys.Queue, status Status, cursor string, limit int, bud *pageBudget) (*JobPage, error) {
	n, inner := 0, ""
	if cursor != "" {
		num, rest, ok := strings.Cut(cursor, "/")
		var err error
		n, err = strconv.Atoi(num)
		if !ok || err != nil || n < 0 || n >= len(qs) || strconv.Itoa(n) != num {
			return nil, invalid("cursor %q is not one of a partitioned %s listing (<partition 0..%d>/<cursor>)", cursor, status, len(qs)-1)
		}
		inner = rest
	}
	out := &JobPage{}
	for ; n < len(qs); n, inner = n+1, "" {
		if len(out.Jobs) >= limit || bud.spent() {
			out.Next = strconv.Itoa(n) + "/"
			return out, nil
		}
		p, err := i.listOne(ctx, qs[n], status, inner, limit-len(out.Jobs), bud)
		if err != nil {
			return nil, err
		}
		out.add(p)
		if p.Next != "" {
			out.Next = strconv.Itoa(n) + "/" + p.Next
			return out, nil
		}
	}
	return out, nil
}

// listSet pages through a sorted set of job ids: scheduled (earliest due first), dead (latest
// death first), or the index of completed or canceled jobs (latest first). An indexed id whose
// record expired is skipped; the index's trim (finish.lua, cancel.lua) removes it in time.
func (i *Inspector) listSet(ctx context.Context, q keys.Queue, status Status, cursor string, limit int, bud *pageBudget) (*JobPage, error) {
	var after *jobstate.SetItem
	if cursor != "" {
		s, id, _ := strings.Cut(cursor, ":")
		score, err := strconv.ParseInt(s, 10, 64)
		if err != nil || !keys.ValidID(id) {
			return nil, invalid("cursor %q is not one of a %s listing (<unix ms>:<job id>)", cursor, status)
		}
		after = &jobstate.SetItem{Score: score, Member: id}
	}
	// One more than the page, to know whether another page follows.
	var items []jobstate.SetItem
	var err error
	switch status {
	case StatusScheduled:
		items, err = i.store.ScheduledPage(ctx, q, after, limit+1)
	case StatusCompleted:
		items, err = i.store.CompletedPage(ctx, q, after, limit+1)
	case StatusCanceled:
		items, err = i.store.CanceledPage(ctx, q, after, limit+1)
	default:
		items, err = i.store.DeadPage(ctx, q, false, after, limit+1)
	}
	if err != nil {
		return nil, err
	}
	p := &JobPage{}
	more := len(items) > limit
	items = items[:min(limit, len(items))]
	ids := make([]string, len(items))
	for k, it := range items {
		ids[k] = it.Member
	}
	// The budget cuts the page before any record is read: the sizes first, then only the
	// records that fit.
	sizes, err := i.store.RecordSizes(ctx, q, ids)
	if err != nil {
		return nil, err
	}
	for k, n := range sizes {
		if k > 0 && bud.spent() {
			items, ids, more = items[:k], ids[:k], true
			break
		}
		bud.take(n)
	}
	if more && len(items) > 0 {
		last := items[len(items)-1]
		p.Next = strconv.FormatInt(last.Score, 10) + ":" + last.Member
	}
	recs, err := i.store.Records(ctx, q, ids)
	if err != nil {
		return nil, err
	}
	for k, it := range items {
		if recs[k] == nil {
			continue // gone since the set was read (purged, or finished and expired)
		}
		j, err := jobFromRecord(q.Name(), it.Member, *recs[k])
		if err != nil {
			return nil, err
		}
		if j.Status != status {
			continue // moved on since the set was read
		}
		p.Jobs = append(p.Jobs, j)
	}
	return p, nil
}

// listQueued pages through the stream entries after the group's last-delivered id.
// XREADGROUP ">" hands entries out in stream order, so every entry after that id is one no
// worker was handed yet. The pending entries in the page's range are left out as well, for
// the rare group whose read position moved back (XGROUP SETID, a failover to older data).
func (i *Inspector) listQueued(ctx context.Context, q keys.Queue, cursor string, limit int) (*JobPage, error) {
	start := "-"
	if cursor != "" {
		id, ok := parseEntryID(cursor)
		if !ok {
			return nil, invalid("cursor %q is not one of a %s listing (a stream entry id)", cursor, StatusQueued)
		}
		start = id.next().String()
	}
	entries, group, err := i.store.StreamPage(ctx, q, start, limit+1)
	if err != nil {
		return nil, err
	}
	if group != nil {
		if last, ok := parseEntryID(group.LastDelivered); ok && last != (entryID{}) {
			if from, _ := parseEntryID(start); start == "-" || !last.less(from) {
				// The cursor is at or before the delivered entries: skip them.
				start = last.next().String()
				if entries, err = i.store.StreamRange(ctx, q, start, limit+1); err != nil {
					return nil, err
				}
			}
		}
	}
	p := &JobPage{}
	if len(entries) > limit {
		entries = entries[:limit]
		p.Next = entries[len(entries)-1].ID
	}
	if len(entries) == 0 {
		return p, nil
	}
	recs, held, err := i.store.EntryRecords(ctx, q, entries, group != nil)
	if err != nil {
		return nil, err
	}
	for k, e := range entries {
		if e.Job == "" || held[e.ID] {
			continue // an unreadable entry (a worker will dead-letter it), or one handed out
		}
		// Only the entry that carries the job now, while the job is queued (not yet started).
		r := recs[k]
		if r == nil || r.Entry != e.ID || Status(r.Status) != StatusQueued {
			continue
		}
		r.Payload = []byte(e.Payload)
		if e.Metadata != "" {
			r.Metadata = e.Metadata
		}
		j, err := jobFromRecord(q.Name(), e.Job, *r)
		if err != nil {
			return nil, err
		}
		p.Jobs = append(p.Jobs, j)
	}
	return p, nil
}

// listInProgress pages through the group's pending entries list and reads the jobs that the
// entries carry in one script.
func (i *Inspector) listInProgress(ctx context.Context, q keys.Queue, cursor string, limit int) (*JobPage, error) {
	start := "-"
	if cursor != "" {
		id, ok := parseEntryID(cursor)
		if !ok {
			return nil, invalid("cursor %q is not one of a %s listing (a stream entry id)", cursor, StatusInProgress)
		}
		start = id.next().String()
	}
	// No stream or no group yet reads as none: nothing was ever handed out.
	pend, err := i.store.PendingPage(ctx, q, start, limit+1)
	if err != nil {
		return nil, err
	}
	p := &JobPage{}
	if len(pend) > limit {
		pend = pend[:limit]
		p.Next = pend[len(pend)-1].Entry
	}
	if len(pend) == 0 {
		return p, nil
	}
	entries := make([]string, len(pend))
	for k, pe := range pend {
		entries[k] = pe.Entry
	}
	rows, err := i.store.EntryJobs(ctx, q, entries)
	if err != nil {
		return nil, err
	}
	p.Leases = make(map[string]Lease, len(rows))
	for k, row := range rows {
		if row.ID == "" {
			continue // the entry carries no live job: recovery or the worker will clear it
		}
		j, err := jobFromHash(q.Name(), row.ID, row.Flat)
		if err != nil {
			return nil, err
		}
		pe := pend[k]
		j.Status, j.Worker, j.Entry = StatusInProgress, pe.Worker, pe.Entry
		if row.Attempt > 0 {
			j.Attempt = row.Attempt
		}
		p.Jobs = append(p.Jobs, j)
		p.Leases[j.ID] = Lease(pe)
	}
	return p, nil
}

// entryID is a stream entry id, <ms>-<seq>.
type entryID struct{ ms, seq uint64 }

func parseEntryID(s string) (entryID, bool) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return entryID{}, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return entryID{ms, seq}, err1 == nil && err2 == nil
}

func (e entryID) String() string {
	return strconv.FormatUint(e.ms, 10) + "-" + strconv.FormatUint(e.seq, 10)
}

// next is the smallest id after e (XRANGE's start is inclusive).
func (e entryID) next() entryID {
	if e.seq == ^uint64(0) {
		return entryID{e.ms + 1, 0}
	}
	return entryID{e.ms, e.seq + 1}
}

func (e entryID) less(o entryID) bool { return e.ms < o.ms || e.ms == o.ms && e.seq < o.seq }

// ---- Dead jobs ----

// Replay moves a dead job back into the stream for a fresh set of attempts. A job published
// WithUnique takes its key again. It returns ErrNotDead for a job that is not in the dead set,
// and ErrNotFound for an unknown id. It returns ErrUniqueHeld when another job holds the
// job's unique key. It returns ErrInvalid for the dead record of an unreadable stream entry,
// which has no type to run.
func (i *Inspector) Replay(ctx context.Context, queue, id string) error {
	if err := i.checkJob(queue, id); err != nil {
		return err
	}
	qs, err := i.lookup(ctx, queue, id)
	if err != nil {
		return err
	}
	now := i.cfg.Now()
	return onPartition(ctx, i.store, qs, id, func(q keys.Queue) error {
		row, err := i.store.Replay(ctx, q, id, now)
		if err != nil {
			return fmt.Errorf("replay %s/%s: %w", queue, id, err)
		}
		return replayError(queue, id, row.Code, row.Data)
	})
}

func replayError(queue, id string, code script.Code, data string) error {
	switch code {
	case script.OK:
		return nil
	case script.NotFound:
		return ErrNotFound
	case script.WrongState:
		return fmt.Errorf("%w (it is %s)", ErrNotDead, data)
	case script.NoType:
		return fmt.Errorf("replay %s/%s: %w: an unreadable entry's record has no type to run", queue, id, ErrInvalid)
	case script.UniqueHeld:
		return fmt.Errorf("replay %s/%s: %w (job %s)", queue, id, ErrUniqueHeld, data)
	}
	return fmt.Errorf("replay %s/%s: unexpected reply %v", queue, id, code)
}

// replayChunk is how many dead jobs ReplayAll replays per round trip.
const replayChunk = 100

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
	qs, err := i.partitions(ctx, queue)
	if err != nil {
		return 0, err
	}
	replayed := 0
	var stay []error
	for _, q := range qs {
		n, s, err := i.replayAll(ctx, q)
		replayed += n
		stay = append(stay, s...)
		if err != nil {
			return replayed, err
		}
	}
	if len(stay) > 0 {
		const named = 3
		more := ""
		if len(stay) > named {
			more = fmt.Sprintf(" (the first %d below)", named)
		}
		return replayed, fmt.Errorf("replay all %s: %d dead jobs cannot run again and stay%s:\n%w",
			queue, len(stay), more, errors.Join(stay[:min(named, len(stay))]...))
	}
	return replayed, nil
}

// replayAll is ReplayAll of one partition; it returns the errors of the jobs that stay apart.
func (i *Inspector) replayAll(ctx context.Context, q keys.Queue) (int, []error, error) {
	queue := q.Name()
	// The last member in the set's order now: ReplayAll stops there.
	last, ok, err := i.store.LastDead(ctx, q)
	if err != nil || !ok {
		return 0, nil, wrapErr(err, "replay all %s", queue)
	}
	var after *jobstate.SetItem
	replayed := 0
	var stay []error
	for {
		items, err := i.store.DeadPage(ctx, q, true, after, replayChunk)
		if err != nil {
			return replayed, stay, fmt.Errorf("replay all %s: %w", queue, err)
		}
		done := len(items) < replayChunk
		for k, it := range items {
			if it.Score > last.Score || it.Score == last.Score && it.Member > last.Member {
				items, done = items[:k], true
				break
			}
		}
		if len(items) == 0 {
			break
		}
		now := i.cfg.Now()
		b := i.store.Batch()
		replays := make([]*jobstate.Pending[jobstate.Row], len(items))
		for k, it := range items {
			replays[k] = b.Replay(q, it.Member, now)
		}
		err = rediserr.Wrap("replay", b.Exec(ctx))
		for k, r := range replays {
			row, cerr := r.Result()
			code, data := row.Code, row.Data
			switch {
			case cerr != nil:
				if err == nil {
					err = cerr
				}
			case code == script.OK:
				replayed++
			case code == script.NotFound || code == script.WrongState:
				// Replayed or purged by someone else since the page was read.
			default:
				stay = append(stay, replayError(queue, items[k].Member, code, data))
			}
		}
		if err != nil {
			return replayed, stay, fmt.Errorf("replay all %s: %w", queue, err)
		}
		if done {
			break
		}
		after = &items[len(items)-1]
	}
	return replayed, stay, nil
}

// purgeChunk bounds the ids one purge_ids.lua call deletes.
const purgeChunk = 500

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
	qs, err := i.partitions(ctx, queue)
	if err != nil {
		return 0, err
	}
	var errs []error
	// The ids of each partition; in a partitioned queue each id is looked for first (one
	// pipeline of EXISTS), and one found nowhere is not found.
	byPart := [][]string{uniq}
	if len(qs) > 1 {
		at, err := i.store.Locate(ctx, qs, uniq)
		if err != nil {
			return 0, fmt.Errorf("purge %s: %w", queue, err)
		}
		byPart = make([][]string, len(qs))
		for k, id := range uniq {
			if at[k] < 0 {
				errs = append(errs, fmt.Errorf("purge %s/%s: %w", queue, id, ErrNotFound))
				continue
			}
			byPart[at[k]] = append(byPart[at[k]], id)
		}
	}
	b := i.store.Batch()
	var purges []*jobstate.Pending[[]jobstate.Row]
	var chunks [][]string
	for p, ids := range byPart {
		for chunk := range slices.Chunk(ids, purgeChunk) {
			purges = append(purges, b.PurgeIDs(qs[p], chunk))
			chunks = append(chunks, chunk)
		}
	}
	if b.Len() == 0 {
		return 0, errors.Join(errs...)
	}
	err = rediserr.Wrap("purge", b.Exec(ctx))
	n := 0
	for c, pr := range purges {
		chunk := chunks[c]
		rows, rerr := pr.Result()
		if rerr != nil {
			err = cmp.Or(err, rerr)
			continue
		}
		for k, row := range rows {
			switch row.Code {
			case script.OK:
				n++
			case script.NotFound:
				errs = append(errs, fmt.Errorf("purge %s/%s: %w", queue, chunk[k], ErrNotFound))
			case script.WrongState:
				errs = append(errs, fmt.Errorf("purge %s/%s: %w (it is %s)", queue, chunk[k], ErrNotDead, row.Data))
			default:
				errs = append(errs, fmt.Errorf("purge %s/%s: unexpected reply %v", queue, chunk[k], row.Code))
			}
		}
	}
	if err != nil {
		errs = append([]error{fmt.Errorf("purge %s: %w", queue, err)}, errs...)
	}
	return n, errors.Join(errs...)
}

// purgeAllChunk bounds the dead jobs one purge.lua call deletes.
const purgeAllChunk = 500

// PurgeAll deletes the dead jobs of queue that died at least olderThan ago (0: all of them), 500
// per script call, and returns how many. Age is measured by Redis's clock, not the caller's.
// A partitioned queue's partitions are purged one after the other.
func (i *Inspector) PurgeAll(ctx context.Context, queue string, olderThan time.Duration) (int, error) {
	if err := i.check(queue, ""); err != nil {
		return 0, err
	}
	if olderThan < 0 {
		return 0, invalid("negative age %s", olderThan)
	}
	qs, err := i.partitions(ctx, queue)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, q := range qs {
		for {
			n, err := i.store.Purge(ctx, q, jobstate.PurgeParams{Limit: purgeAllChunk, OlderThan: olderThan})
			total += n
			if err != nil {
				return total, fmt.Errorf("purge %s: %w", queue, err)
			}
			if n < purgeAllChunk {
				break
			}
		}
	}
	return total, nil
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
	var qs []keys.Queue // every partition; a queue of one has its plain keys alone
	p, err := partitionCount(ctx, i.rdb, i.cfg.Prefix, queue)
	if errors.Is(err, errLegacyLayout) {
		// Partitioned by the version before: its {queue#i} keys go the same way.
		qs, err = jobstate.LegacyPartitions(ctx, i.rdb, i.cfg.Prefix, queue)
		if err != nil {
			return fmt.Errorf("delete queue %s: %w", queue, err)
		}
		p = len(qs)
	} else if err == nil {
		qs = allPartitions(i.cfg.Prefix, queue, p)
	}
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", queue, err)
	}
	if !force {
		parts, err := readStats(ctx, i.store, qs)
		if err != nil {
			return fmt.Errorf("delete queue %s: %w", queue, err)
		}
		st := sumStats(queue, parts)
		if st.Scheduled+st.Queued+st.InProgress+st.Dead > 0 {
			return fmt.Errorf("delete queue %s: %w: %d scheduled, %d queued, %d in progress, %d dead",
				queue, ErrQueueBusy, st.Scheduled, st.Queued, st.InProgress, st.Dead)
		}
	}
	known, err := i.store.IsKnownQueue(ctx, queue)
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", queue, err)
	}
	// The plain keys first: all under the queue's base, prefix:{queue}:, so in one slot, and
	// one master is scanned on a cluster. Then those of every partition of every count the
	// queue ever had: the empty streams a change of the count leaves, and the tags of the
	// version before. On a cluster those are on every master.
	n, err := i.store.ScanKeys(ctx, i.keys(queue).Base(), true, false)
	if err == nil {
		var m int
		m, err = i.store.ScanKeys(ctx, i.cfg.Prefix+":{"+queue+string(keys.PartitionSep), true, true)
		n += m
	}
	if err != nil {
		return fmt.Errorf("delete queue %s (%d keys deleted): %w", queue, n, err)
	}
	// The partition count and the name go last: a deletion that failed half-way still shows
	// the queue, to try again.
	if p > 1 {
		// Its partitions stay closed a while: a producer that still has the count refuses to
		// publish to them, reads it again and publishes to the plain queue.
		if err := setClosed(ctx, i.rdb, qs[:p], true); err != nil {
			return fmt.Errorf("delete queue %s: %w", queue, err)
		}
		if err := jobstate.ForgetPartitions(ctx, i.rdb, i.cfg.Prefix, queue); err != nil {
			return fmt.Errorf("delete queue %s: %w", queue, err)
		}
		layoutChanges.Add(1)
		n++
	}
	if err := i.store.ForgetQueue(ctx, queue); err != nil {
		return fmt.Errorf("delete queue %s: %w", queue, err)
	}
	// A queue made again under the name starts with no settings, unpaused.
	if err := i.store.DeleteSettings(ctx, queue); err != nil {
		return fmt.Errorf("delete queue %s: %w", queue, err)
	}
	if !known && n == 0 {
		return fmt.Errorf("delete queue %s: %w", queue, ErrQueueNotFound)
	}
	return nil
}

// wrapErr wraps a non-nil err with a formatted context.
func wrapErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
