package jobstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/status"
)

// The reads of job state: what pipeline's Client and Inspector show of jobs. Each read sends
// the commands of one round trip (one pipeline) and decodes their replies here, so a caller
// sees Go values and no go-redis command.

// Record is a job's record (its hash, keys.Field*), decoded. A field the hash lacks keeps its
// zero value; Payload and Result stay nil unless the field is there (even empty).
type Record struct {
	Type        string
	Status      string // a status.Status
	Attempt     int
	MaxRetries  int
	Timeout     time.Duration
	CreatedAt   time.Time
	RunAt       time.Time
	EnqueuedAt  time.Time
	StartedAt   time.Time
	CompletedAt time.Time
	Worker      string
	Entry       string
	LastError   string
	Result      []byte
	Version     int64
	Payload     []byte
	// Metadata is encoded (stream.EncodeMetadata); empty when the job has none.
	Metadata string
	// The debounce window of a job published with a debounce key: the key's full name
	// (keys.Queue.Debounce; empty for other jobs), the first publish, the latest due time, and
	// the publishes it took.
	Debounce                     string
	DebounceFirst, DebounceUntil time.Time
	DebouncePubs                 int
	Group                        string // the job's fair group (keys.FieldGroup); empty: none
	// WorkflowKey is the hash of the workflow the job is a task of (keys.FieldWorkflow), and
	// Task its name there; both empty for a job of no workflow.
	WorkflowKey, Task string
	Snoozes           int    // keys.FieldSnoozes
	ScheduledFor      string // keys.FieldScheduledFor: "retry", "snooze" or empty
	Priority          int    // keys.FieldPriority; absent: keys.MinPriority
	// Progress is the last progress report (keys.FieldProgress), nil when there is none or it
	// is malformed; ProgressReport.Shown says whether it belongs to the job as it is now.
	Progress *ProgressReport
	// Attempts is the attempt history (keys.FieldAttempts), oldest first: the attempts that
	// ended without completing the job. The last attempt of a job that completed, was
	// canceled or runs is not in it (AttemptRecord's doc).
	Attempts []AttemptRecord
	// What a reader derives a waiting job's reason from (internal/inspect's why.go):
	// LimitWait is keys.FieldLimitWait, RateWait keys.FieldRateWait (raw), WfDeps the ids of
	// the workflow tasks the task runs after (keys.FieldWfDeps) and WfFinally its mode.
	LimitWait, RateWait string
	WfDeps              []string
	WfFinally           bool
}

// AttemptRecord is one attempt of a job's attempt history (keys.FieldAttempts).
type AttemptRecord struct {
	Attempt int
	Worker  string
	Started time.Time // zero when unknown (a worker lost before its start mark)
	Ended   time.Time
	Outcome string // keys.AttemptRetry, AttemptSnooze, AttemptLost or AttemptFailed
	Error   string
}

// ParseAttempts reads a job's attempt history field; a malformed line is skipped.
func ParseAttempts(v string) []AttemptRecord {
	if v == "" {
		return nil
	}
	var out []AttemptRecord
	for line := range strings.SplitSeq(v, "\n") {
		f := strings.SplitN(line, "\t", 6)
		if len(f) != 6 {
			continue
		}
		n, err1 := strconv.Atoi(f[0])
		s, err2 := strconv.ParseInt(f[2], 10, 64)
		e, err3 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, AttemptRecord{Attempt: n, Worker: f[1], Started: fromMS(s), Ended: fromMS(e),
			Outcome: f[4], Error: f[5]})
	}
	return out
}

// AllAttempts is the job's attempts, oldest first, the last n. First comes its attempt
// history, then its last attempt read from the hash itself (worker, started_at, completed_at),
// unless the history has it already (the same start). That last one is added for a job that
// runs, completed or was canceled. It is added for a failed job too when its history lacks the
// attempt, as for one that failed before histories were kept.
func (r *Record) AllAttempts(n int) []AttemptRecord {
	out := slices.Clone(r.Attempts)
	seen := slices.ContainsFunc(out, func(a AttemptRecord) bool {
		return !a.Started.IsZero() && a.Started.Equal(r.StartedAt)
	})
	if !r.StartedAt.IsZero() && !seen {
		last := AttemptRecord{Attempt: r.Attempt, Worker: r.Worker, Started: r.StartedAt, Ended: r.CompletedAt}
		switch status.Status(r.Status) {
		case status.InProgress:
			last.Outcome, last.Ended = status.AttemptRunning, time.Time{}
		case status.Completed:
			last.Outcome = status.AttemptCompleted
		case status.Canceled:
			last.Outcome = status.AttemptCanceled
		case status.Failed:
			last.Outcome, last.Error = status.AttemptFailed, r.LastError
		}
		if last.Outcome != "" {
			out = append(out, last)
		}
	}
	return out[max(0, len(out)-n):]
}

// DecodeRecord reads a job's hash as a flat field/value list (Get, EntryJob.Flat). A later
// field overrides an earlier one of the same name, as the entry's payload does the hash's (but
// an empty metadata does not). A record without run_at was queued at once: its RunAt, and
// its EnqueuedAt when unset, are its CreatedAt.
func DecodeRecord(flat []string) Record {
	var r Record
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	var pieces []string // name+k, value: a completed record's long fields (keys.PieceSep)
	for i := 0; i+1 < len(flat); i += 2 {
		v := flat[i+1]
		if strings.Contains(flat[i], keys.PieceSep) {
			pieces = append(pieces, flat[i], v)
			continue
		}
		switch flat[i] {
		case keys.FieldType:
			r.Type = v
		case keys.FieldPriority:
			r.Priority = int(num(v))
		case keys.FieldStatus:
			r.Status = v
		case keys.FieldAttempt:
			r.Attempt = int(num(v))
		case keys.FieldMaxRetries:
			r.MaxRetries = int(num(v))
		case keys.FieldTimeout:
			r.Timeout = time.Duration(num(v)) * time.Millisecond
		case keys.FieldCreatedAt:
			r.CreatedAt = fromMS(num(v))
		case keys.FieldRunAt:
			r.RunAt = fromMS(num(v))
		case keys.FieldEnqueuedAt:
			r.EnqueuedAt = fromMS(num(v))
		case keys.FieldStartedAt:
			r.StartedAt = fromMS(num(v))
		case keys.FieldCompletedAt:
			r.CompletedAt = fromMS(num(v))
		case keys.FieldWorker:
			r.Worker = v
		case keys.FieldEntry:
			r.Entry = v
		case keys.FieldLastError:
			r.LastError = v
		case keys.FieldResult:
			r.Result = []byte(v)
		case keys.FieldVersion:
			r.Version = num(v)
		case keys.FieldPayload:
			r.Payload = []byte(v)
		case keys.FieldMetadata:
			if v != "" { // an entry without metadata leaves the hash's
				r.Metadata = v
			}
		case keys.FieldDebounce:
			r.Debounce = v
		case keys.FieldGroup:
			r.Group = v
		case keys.FieldWorkflow:
			r.WorkflowKey = v
		case keys.FieldWfTask:
			r.Task = v
		case keys.FieldSnoozes:
			r.Snoozes = int(num(v))
		case keys.FieldScheduledFor:
			r.ScheduledFor = v
		case keys.FieldDebounceFirst:
			r.DebounceFirst = fromMS(num(v))
		case keys.FieldDebounceUntil:
			r.DebounceUntil = fromMS(num(v))
		case keys.FieldDebouncePubs:
			r.DebouncePubs = int(num(v))
		case keys.FieldAttempts:
			r.Attempts = ParseAttempts(v)
		case keys.FieldLimitWait:
			r.LimitWait = v
		case keys.FieldRateWait:
			r.RateWait = v
		case keys.FieldWfDeps:
			r.WfDeps = strings.Fields(v)
		case keys.FieldWfMode:
			r.WfFinally = v == "1"
		case keys.FieldProgress:
			if p, ok := ParseProgress(v); ok {
				r.Progress = &p
			} else {
				r.Progress = nil
			}
		}
	}
	if pieces != nil {
		r.Payload = joinPieces(r.Payload, keys.FieldPayload, pieces)
		r.Result = joinPieces(r.Result, keys.FieldResult, pieces)
		if md := joinPieces([]byte(r.Metadata), keys.FieldMetadata, pieces); len(md) > 0 {
			r.Metadata = string(md)
		}
	}
	// A job queued at once stores neither run_at nor enqueued_at: both are created_at. (A
	// delayed job always has run_at, and enqueued_at once it entered the stream.)
	if r.RunAt.IsZero() {
		r.RunAt = r.CreatedAt
		if r.EnqueuedAt.IsZero() {
			r.EnqueuedAt = r.CreatedAt
		}
	}
	if r.Priority < keys.MinPriority || r.Priority > keys.MaxPriority {
		r.Priority = keys.MinPriority
	}
	return r
}

// joinPieces appends to first the pieces of field name (keys.PieceSep) found in pieces, a flat
// name/value list in any order: a hash that outgrew its listpack returns its fields unordered.
func joinPieces(first []byte, name string, pieces []string) []byte {
	if len(first) != keys.RecordPiece {
		return first
	}
	out := first
	for k := 1; k <= keys.RecordMaxPieces; k++ {
		want := name + keys.PieceSep + strconv.Itoa(k)
		i := 0
		for i < len(pieces) && pieces[i] != want {
			i += 2
		}
		if i >= len(pieces) {
			break
		}
		out = append(out[:len(out):len(out)], pieces[i+1]...)
	}
	return out
}

// fromMS is the time of a record's unix-ms field; 0 (unset) is the zero time.
func fromMS(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// decodeMap is DecodeRecord of a hash read as a map (HGETALL).
func decodeMap(h map[string]string) Record {
	flat := make([]string, 0, 2*len(h))
	for k, v := range h {
		flat = append(flat, k, v)
	}
	return DecodeRecord(flat)
}

// Lookup names one job: its id in a queue or partition.
type Lookup struct {
	Queue keys.Queue
	ID    string
}

// findScripts is the most lookups FindFirst reads with a script each, in one round trip (a
// partitioned queue's partitions): past it, it asks which exist first.
const findScripts = 16

// FindFirst reads the jobs of lookups in order and returns the index of the first one found
// and its record; -1 when none is. Up to findScripts lookups are read with get.lua each, in one
// pipeline. More lookups (one across every known queue) first ask which job hashes exist.
// Then get.lua runs only on those, most often one. On a standalone server such a lookup costs
// about 10 EXISTS per tenfold of queues (narrow). On a cluster it costs one EXISTS per queue
// in one pipeline. (Its queues' keys are on other slots; go-redis sends each node its own in
// one round trip.) Either way it is not a script call per queue.
func (s *Store) FindFirst(ctx context.Context, lookups []Lookup) (int, Record, error) {
	if len(lookups) == 0 {
		return -1, Record{}, nil
	}
	if len(lookups) <= findScripts {
		return findScripted(ctx, s.rdb, lookups)
	}
	var candidates []int
	{
		var err error
		if candidates, err = existing(ctx, s.rdb, lookups); err != nil {
			return -1, Record{}, rediserr.Wrap("get", err)
		}
	}
	for _, k := range candidates {
		// A hash seen a moment ago may be gone (expired, purged): then the next one.
		flat, found, err := s.Get(ctx, lookups[k].Queue, lookups[k].ID)
		if err != nil {
			return -1, Record{}, err
		}
		if found {
			return k, DecodeRecord(flat), nil
		}
	}
	return -1, Record{}, nil
}

// findScripted is FindFirst of a few lookups: get.lua on each, in one pipeline.
func findScripted(ctx context.Context, rdb redis.UniversalClient, lookups []Lookup) (int, Record, error) {
	calls := make([]script.Call, len(lookups))
	for k, l := range lookups {
		calls[k] = getCall(l.Queue, l.ID)
	}
	cmds, err := script.Pipelined(ctx, rdb, calls)
	if err != nil && !errors.Is(err, redis.Nil) {
		return -1, Record{}, rediserr.Wrap("get", err)
	}
	for k, cmd := range cmds {
		flat, found, err := getReply(cmd)
		if err != nil {
			return -1, Record{}, err
		}
		if found {
			return k, DecodeRecord(flat), nil
		}
	}
	return -1, Record{}, nil
}

// existing returns, in order, the indexes of lookups whose job hash exists.
func existing(ctx context.Context, rdb redis.UniversalClient, lookups []Lookup) ([]int, error) {
	all := make([]int, len(lookups))
	for k := range all {
		all[k] = k
	}
	if script.IsCluster(rdb) {
		// A multi-key EXISTS must stay in one slot there.
		return existsEach(ctx, rdb, lookups, all)
	}
	return narrow(ctx, rdb, lookups, all)
}

// existsFanout is how many parts narrow splits a set of keys into at each step.
const existsFanout = 10

// narrow finds which of idx's job hashes exist on a server that is not a cluster. It sends one
// multi-key EXISTS per tenth of them. Then it does the same on each tenth that had a hit,
// down to EXISTS per key. Most lookups find one job or none, so n keys cost about 10 x log10(n)
// commands in as many round trips, not n.
func narrow(ctx context.Context, rdb redis.UniversalClient, lookups []Lookup, idx []int) ([]int, error) {
	if len(idx) <= existsFanout {
		return existsEach(ctx, rdb, lookups, idx)
	}
	size := (len(idx) + existsFanout - 1) / existsFanout
	var parts [][]int
	var cmds []*redis.IntCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part := range slices.Chunk(idx, size) {
			ks := make([]string, len(part))
			for k, i := range part {
				ks[k] = lookups[i].Queue.Job(lookups[i].ID)
			}
			parts = append(parts, part)
			cmds = append(cmds, p.Exists(ctx, ks...))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []int
	for k, c := range cmds {
		if c.Val() == 0 {
			continue
		}
		found, err := narrow(ctx, rdb, lookups, parts[k])
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// existsEach asks whether each of idx's job hashes exists, in one pipeline.
func existsEach(ctx context.Context, rdb redis.UniversalClient, lookups []Lookup, idx []int) ([]int, error) {
	cmds := make([]*redis.IntCmd, len(idx))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range idx {
			cmds[k] = p.Exists(ctx, lookups[i].Queue.Job(lookups[i].ID))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []int
	for k, c := range cmds {
		if c.Val() > 0 {
			out = append(out, idx[k])
		}
	}
	return out, nil
}

// Records reads the records of jobs ids of q (their hashes alone, without the stream entry's
// payload) in one pipeline; a job with no record has nil.
func (s *Store) Records(ctx context.Context, q keys.Queue, ids []string) ([]*Record, error) {
	out := make([]*Record, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	p := s.rdb.Pipeline()
	hashes := make([]*redis.MapStringStringCmd, len(ids))
	for k, id := range ids {
		hashes[k] = p.HGetAll(ctx, q.Job(id))
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, rediserr.Wrap("get", err)
	}
	for k, h := range hashes {
		if m := h.Val(); len(m) > 0 {
			r := decodeMap(m)
			out[k] = &r
		}
	}
	return out, nil
}

// RecordSizes returns the bytes of the payload and result fields of each of jobs ids of q. It
// is 0 for a job with no record, or whose payload is in its stream entry. It uses one pipeline
// of HSTRLENs, to tell what reading the records would cost without reading them. A record that
// may keep them in pieces (keys.PieceSep) counts every field as a piece: a bound, not a count.
func (s *Store) RecordSizes(ctx context.Context, q keys.Queue, ids []string) ([]int64, error) {
	out := make([]int64, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	p := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, 3*len(ids))
	for _, id := range ids {
		cmds = append(cmds, p.HStrLen(ctx, q.Job(id), keys.FieldPayload), p.HStrLen(ctx, q.Job(id), keys.FieldResult),
			p.HLen(ctx, q.Job(id)))
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, rediserr.Wrap("list", err)
	}
	for k := range ids {
		payload, result := cmds[3*k].Val(), cmds[3*k+1].Val()
		out[k] = payload + result
		if payload == keys.RecordPiece || result == keys.RecordPiece {
			out[k] += cmds[3*k+2].Val() * keys.RecordPiece
		}
	}
	return out, nil
}

// Locate finds which of qs holds each of ids with one pipeline of EXISTS (len(ids) x len(qs)
// commands), for a job of a partitioned queue that is not where its id routes. A job found in
// none maps to -1.
func (s *Store) Locate(ctx context.Context, qs []keys.Queue, ids []string) ([]int, error) {
	cmds := make([]*redis.IntCmd, len(ids)*len(qs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, id := range ids {
			for n, q := range qs {
				cmds[k*len(qs)+n] = p.Exists(ctx, q.Job(id))
			}
		}
		return nil
	})
	if err != nil {
		return nil, rediserr.Wrap("get", err)
	}
	at := make([]int, len(ids))
	for k := range ids {
		at[k] = -1
		for n := range qs {
			if cmds[k*len(qs)+n].Val() > 0 {
				at[k] = n
				break
			}
		}
	}
	return at, nil
}

// ---- Wait lists: the jobs waiting for a concurrency slot or a fair group's window ----

// WaitItem is a job id read from a wait list (WaitListPage): the list's member name in its
// set (a limit's scope instance, a fair group) and the id's position in the list, from 0.
type WaitItem struct {
	List string
	ID   string
	Pos  int
}

// WaitListPage reads up to n ids from the wait lists whose names are the members of the set
// at key set, each list at prefix + member (keys.Queue.LimitWaiters and LimitWaiting(""),
// GroupsWaiting and GroupWaiting("")). The lists are read in member order, from list from
// (or the first member after it, when it has no list now) past its first skip ids: one
// SMEMBERS, then one LRANGE per list read. A list changes while it is read (a woken job
// leaves its head), so a position is where the id was at the read.
func (s *Store) WaitListPage(ctx context.Context, set, prefix, from string, skip, n int) ([]WaitItem, error) {
	rdb := s.rdb
	members, err := rdb.SMembers(ctx, set).Result()
	if err != nil {
		return nil, rediserr.Wrap("list", err)
	}
	slices.Sort(members)
	var out []WaitItem
	for _, m := range members {
		if len(out) >= n {
			break
		}
		if m < from {
			continue
		}
		start := 0
		if m == from {
			start = skip
		}
		ids, err := rdb.LRange(ctx, prefix+m, int64(start), int64(start+n-len(out)-1)).Result()
		if err != nil {
			return nil, rediserr.Wrap("list", err)
		}
		for k, id := range ids {
			out = append(out, WaitItem{List: m, ID: id, Pos: start + k})
		}
	}
	return out, nil
}

// HasWaitLists reports whether the set at key set names any wait list (WaitListPage's).
func (s *Store) HasWaitLists(ctx context.Context, set string) (bool, error) {
	n, err := s.rdb.SCard(ctx, set).Result()
	return n > 0, rediserr.Wrap("list", err)
}

// ---- Sorted sets: the scheduled and dead sets ----

// At is the item's score as a time: a scheduled job's due time, a dead job's death.
func (s SetItem) At() time.Time { return time.UnixMilli(s.Score) }

// ScheduledPage is SetPage of q's scheduled set, earliest due first.
func (s *Store) ScheduledPage(ctx context.Context, q keys.Queue, after *SetItem, n int) ([]SetItem, error) {
	return s.SetPage(ctx, q.Scheduled(), false, after, n)
}

// DeadPage is SetPage of q's dead set, latest death first, or earliest first when oldest.
func (s *Store) DeadPage(ctx context.Context, q keys.Queue, oldest bool, after *SetItem, n int) ([]SetItem, error) {
	return s.SetPage(ctx, q.Dead(), !oldest, after, n)
}

// CompletedPage is IndexPage of q's index of completed jobs (keys.Queue.Completed).
func (s *Store) CompletedPage(ctx context.Context, q keys.Queue, after *SetItem, n int) ([]SetItem, error) {
	return s.IndexPage(ctx, q.Completed(), after, n)
}

// CanceledPage is IndexPage of q's index of canceled jobs (keys.Queue.Canceled).
func (s *Store) CanceledPage(ctx context.Context, q keys.Queue, after *SetItem, n int) ([]SetItem, error) {
	return s.IndexPage(ctx, q.Canceled(), after, n)
}

// indexRead is how many chunks of an index IndexPage reads a round: a worker's finish call
// puts up to 50 ids in one, so a page of 100 is a round or two.
const indexRead = 16

// IndexPage reads up to n ids of an index of finished jobs (lua/record.lua's cv_index). The
// index is a sorted set of chunks, each the space-separated ids of one call, scored by its
// latest finish. The page goes latest chunk first and, within a chunk, last id first. Each
// item's Score is its chunk's. A nil after starts at the newest. Otherwise the page starts
// after that item, found among the chunks of its score. When it is gone (trimmed), the page
// starts at the next lower score.
func (s *Store) IndexPage(ctx context.Context, key string, after *SetItem, n int) ([]SetItem, error) {
	max, skipping := "+inf", after != nil
	if after != nil {
		max = strconv.FormatInt(after.Score, 10)
	}
	var out []SetItem
	for offset := int64(0); len(out) < n; {
		chunks, err := s.rdb.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: max, Min: "-inf", Offset: offset, Count: indexRead}).Result()
		if err != nil {
			return nil, rediserr.Wrap("list", err)
		}
		for _, z := range chunks {
			member, _ := z.Member.(string)
			ids := strings.Fields(member)
			score := int64(z.Score)
			for k := len(ids) - 1; k >= 0; k-- {
				if skipping {
					if score >= after.Score {
						skipping = ids[k] != after.Member
						continue
					}
					skipping = false
				}
				out = append(out, SetItem{Member: ids[k], Score: score})
				if len(out) == n {
					return out, nil
				}
			}
		}
		if len(chunks) < indexRead {
			break
		}
		offset += int64(len(chunks))
	}
	return out, nil
}

// LastDead returns the member of q's dead set that is last in the set's order (the latest
// death, the greatest member among equal scores); ok is false when the set is empty.
func (s *Store) LastDead(ctx context.Context, q keys.Queue) (last SetItem, ok bool, err error) {
	z, err := s.rdb.ZRevRangeWithScores(ctx, q.Dead(), 0, 0).Result()
	if err != nil || len(z) == 0 {
		return SetItem{}, false, rediserr.Wrap("list", err)
	}
	return SetItem{Member: fmt.Sprint(z[0].Member), Score: int64(z[0].Score)}, true, nil
}

// ---- The stream and its consumer group ----

// Entry is a stream entry as the Inspector shows it: the job it names and what it carries.
type Entry struct {
	ID string
	// Job is the job id the entry names; empty when that is not a valid id (an unreadable
	// entry, which a worker dead-letters).
	Job      string
	Payload  string
	Metadata string
}

// Group is the state of a queue's consumer group (keys.Group).
type Group struct {
	// LastDelivered is the id of the last entry handed to a worker ("0-0": none yet).
	LastDelivered string
	// Pending counts the entries handed out and not yet acknowledged: jobs in progress.
	Pending int64
}

// StreamPage reads up to n entries of q's stream from start ("-" or an entry id, inclusive)
// on, and the consumer group (nil when there is none yet), in one round trip.
func (s *Store) StreamPage(ctx context.Context, q keys.Queue, start string, n int) ([]Entry, *Group, error) {
	var groups *redis.XInfoGroupsCmd
	var msgs *redis.XMessageSliceCmd
	// The commands carry the pipeline's errors, but for a connection that could not be set
	// up (pipelineErr); a queue no worker read yet has no group.
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		groups = p.XInfoGroups(ctx, q.Stream())
		msgs = p.XRangeN(ctx, q.Stream(), start, "+", int64(n))
		return nil
	})
	if err := pipelineErr(err, groups, msgs); err != nil {
		return nil, nil, rediserr.Wrap("list", err)
	}
	if err := msgs.Err(); err != nil {
		return nil, nil, rediserr.Wrap("list", err)
	}
	if err := groups.Err(); err != nil && !rediserr.IsNoStream(err) {
		return nil, nil, rediserr.Wrap("list", err)
	}
	var g *Group
	for _, gi := range groups.Val() {
		if gi.Name == keys.Group {
			g = &Group{LastDelivered: gi.LastDeliveredID, Pending: gi.Pending}
		}
	}
	return entries(msgs.Val()), g, nil
}

// StreamRange reads up to n entries of q's stream from start (inclusive) on.
func (s *Store) StreamRange(ctx context.Context, q keys.Queue, start string, n int) ([]Entry, error) {
	msgs, err := s.rdb.XRangeN(ctx, q.Stream(), start, "+", int64(n)).Result()
	if err != nil {
		return nil, rediserr.Wrap("list", err)
	}
	return entries(msgs), nil
}

func entries(msgs []redis.XMessage) []Entry {
	out := make([]Entry, len(msgs))
	for k, m := range msgs {
		out[k].ID = m.ID
		if id, _ := m.Values[keys.EntryUUID].(string); keys.ValidID(id) {
			out[k].Job = id
		}
		out[k].Payload, _ = m.Values[keys.EntryPayload].(string)
		out[k].Metadata, _ = m.Values[keys.EntryMetadata].(string)
	}
	return out
}

// EntryRecords reads, in one pipeline, the records of the jobs that entries of q name. A
// record is nil for an entry that names none, or a job with no record. When pending is true,
// it also reads which entries are in the consumer group's pending entries list (handed to a
// worker).
func (s *Store) EntryRecords(ctx context.Context, q keys.Queue, es []Entry, pending bool) ([]*Record, map[string]bool, error) {
	recs := make([]*Record, len(es))
	held := map[string]bool{}
	if len(es) == 0 {
		return recs, held, nil
	}
	p := s.rdb.Pipeline()
	hashes := make([]*redis.MapStringStringCmd, len(es))
	for k, e := range es {
		if e.Job != "" {
			hashes[k] = p.HGetAll(ctx, q.Job(e.Job))
		}
	}
	var pend *redis.XPendingExtCmd
	if pending {
		pend = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.Stream(), Group: keys.Group,
			Start: es[0].ID, End: es[len(es)-1].ID, Count: int64(2 * len(es))})
	}
	if p.Len() > 0 {
		if _, err := p.Exec(ctx); err != nil {
			return nil, nil, rediserr.Wrap("list", err)
		}
	}
	for k, h := range hashes {
		if h != nil {
			if m := h.Val(); len(m) > 0 {
				r := decodeMap(m)
				recs[k] = &r
			}
		}
	}
	if pend != nil {
		for _, pe := range pend.Val() {
			held[pe.ID] = true
		}
	}
	return recs, held, nil
}

// Lease is an entry of the consumer group's pending entries list: a job a worker holds. Its
// fields are pipeline.Lease's, in the same order, so that one converts to the other.
type Lease struct {
	Entry      string
	Worker     string        // the consumer that holds it
	Idle       time.Duration // since it was handed out or its lease last renewed
	Deliveries int64         // the times it was handed out
}

// PendingPage reads up to n entries of q's pending entries list from start ("-" or an entry
// id, inclusive) on, in entry order; none when q has no stream or group yet.
func (s *Store) PendingPage(ctx context.Context, q keys.Queue, start string, n int) ([]Lease, error) {
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.Stream(), Group: keys.Group,
		Start: start, End: "+", Count: int64(n)}).Result()
	if rediserr.IsNoStream(err) {
		return nil, nil // nothing was ever handed out
	}
	if err != nil {
		return nil, rediserr.Wrap("list", err)
	}
	out := make([]Lease, len(pend))
	for k, pe := range pend {
		out[k] = Lease{Entry: pe.ID, Worker: pe.Consumer, Idle: pe.Idle, Deliveries: pe.RetryCount}
	}
	return out, nil
}

// IdlePageParams asks for a page of a stream's pending entries idle at least MinIdle.
type IdlePageParams struct {
	Queue   keys.Queue // the stream's queue or level view
	MinIdle time.Duration
	Start   string // "-" or an entry id, inclusive
	N       int
}

// IdlePage reads up to p.N pending entries of p.Queue's stream idle at least p.MinIdle, in
// entry order. Its error is Redis's own, unwrapped: a stream or group not made yet is for
// the caller (package recovery) to tell from an outage.
func (s *Store) IdlePage(ctx context.Context, p IdlePageParams) ([]Lease, error) {
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: p.Queue.Stream(), Group: keys.Group,
		Idle: p.MinIdle, Start: p.Start, End: "+", Count: int64(p.N)}).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Lease, len(pend))
	for k, pe := range pend {
		out[k] = Lease{Entry: pe.ID, Worker: pe.Consumer, Idle: pe.Idle, Deliveries: pe.RetryCount}
	}
	return out, nil
}

// ErrNoJob is Status's answer for a job that has no record.
var ErrNoJob = errors.New("jobstate: no such job")

// Status reads job id's status field alone: one HGET, for the checks that need nothing else.
func (s *Store) Status(ctx context.Context, q keys.Queue, id string) (string, error) {
	st, err := s.rdb.HGet(ctx, q.Job(id), keys.FieldStatus).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNoJob
	}
	return st, err
}

// Consumer is one reader of a queue's consumer group.
type Consumer struct {
	Name    string
	Idle    time.Duration
	Pending int64
}

// Consumers reads the consumers of q's group; the error is Redis's own (no group yet, say).
func (s *Store) Consumers(ctx context.Context, q keys.Queue) ([]Consumer, error) {
	cs, err := s.rdb.XInfoConsumers(ctx, q.Stream(), keys.Group).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Consumer, len(cs))
	for k, c := range cs {
		out[k] = Consumer{Name: c.Name, Idle: c.Idle, Pending: c.Pending}
	}
	return out, nil
}
