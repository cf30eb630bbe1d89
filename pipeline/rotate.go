package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/status"
)

// The places RotateKeys reports on (RotateReport.Places). Jobs waiting for a concurrency slot
// count as scheduled, jobs waiting for their fair group's window as queued: they are listed
// under those statuses.
const (
	RotateScheduled       = string(status.Scheduled)
	RotateQueued          = string(status.Queued)
	RotateWaiting         = string(status.Waiting)
	RotateDead            = "dead"
	RotateCompleted       = string(status.Completed)
	RotateCanceled        = string(status.Canceled)
	RotateWorkflowResults = "workflow_results"
	// RotateLogs counts the attempts' log lines (Job.Logger) of the jobs gone through, one
	// value an attempt, whatever the job's status.
	RotateLogs = "logs"
)

// Bounds of RotateOptions.Batch.
const (
	DefaultRotateBatch = 100
	MaxRotateBatch     = 1000
)

// RotateOptions tunes RotateKeys.
type RotateOptions struct {
	// Batch is how many jobs one round trip reads, and one script call re-seals. Defaults to
	// DefaultRotateBatch; at most MaxRotateBatch.
	Batch int
	// Max, when positive, bounds the values one call examines: the run stops at the first
	// batch's end at or past Max values (so it may examine up to a batch more) and answers
	// RotateReport.Cursor to go on from. Zero goes through everything in one call.
	Max int
	// Cursor is a RotateReport.Cursor of an earlier run over the same queue argument: the run
	// goes on where that one stopped. Empty starts at the beginning.
	Cursor string
}

// RotateCounts counts what a rotation found in one place. Each stored value (a payload, a
// result, an attempt's log lines) is counted once. Empty values hold nothing to hide and are not counted.
type RotateCounts struct {
	// Resealed values were sealed under an older key and are now under the newest.
	Resealed int `json:"resealed"`
	// Sealed values were stored plain (before encryption was turned on) and are now sealed.
	Sealed int `json:"sealed"`
	// Current values were already under the newest key: nothing was written.
	Current int `json:"current"`
	// MovedOn values changed between the read and the write (the job moved on): left alone
	// for a later run.
	MovedOn int `json:"moved_on"`
	// Running values are queued jobs' stream entries a worker has read: left alone. The job's
	// record is written by the worker when it ends; a later run gets what is left.
	Running int `json:"running"`
	// Gone values' jobs were deleted or expired between the read and the write, or are no
	// Conveyor job's (an entry another Watermill publisher added): nothing to re-seal.
	Gone int `json:"gone"`
	// Failed values could not be opened: sealed under a key the keyring lacks (MissingKeys
	// says which), or damaged.
	Failed int `json:"failed"`
	// MissingKeys are the ids of the keys that values were sealed under that the keyring lacks.
	MissingKeys []string `json:"missing_keys,omitempty"`
}

// Changed is the number of values written.
func (c *RotateCounts) Changed() int { return c.Resealed + c.Sealed }

// Left is the number of values a later run may still have to re-seal.
func (c *RotateCounts) Left() int { return c.MovedOn + c.Running + c.Failed }

func (c *RotateCounts) add(o *RotateCounts) {
	c.Resealed += o.Resealed
	c.Sealed += o.Sealed
	c.Current += o.Current
	c.MovedOn += o.MovedOn
	c.Running += o.Running
	c.Gone += o.Gone
	c.Failed += o.Failed
	for _, k := range o.MissingKeys {
		if !slices.Contains(c.MissingKeys, k) {
			c.MissingKeys = append(c.MissingKeys, k)
		}
	}
	slices.Sort(c.MissingKeys)
}

// RotateReport is what RotateKeys did.
type RotateReport struct {
	// Key is the id of the newest key, which every value re-sealed is now under.
	Key string `json:"key"`
	// Queues is the names of the queues gone through.
	Queues []string `json:"queues"`
	// Places counts by place (RotateScheduled, ...).
	Places map[string]*RotateCounts `json:"places"`
	// Total sums Places.
	Total RotateCounts `json:"total"`
	// Cursor is set when RotateOptions.Max stopped the run before the end: pass it as
	// RotateOptions.Cursor to go on. The counts of the runs add up to those of one run
	// through everything (on a store nothing else writes). Empty: the run went through
	// everything.
	Cursor string `json:"cursor,omitempty"`
}

// RotateKeys re-seals the payloads and results stored in queue ("" for every known queue)
// under k's newest key: scheduled, queued (stream entries no worker has read), waiting
// workflow tasks, dead, completed and canceled jobs within retention, and workflows' and
// batches' task results; and the log lines of those jobs' attempts (RotateLogs), the lines
// only: an attempt's number, outcome, end and count of lines cut stay plain. The lines of a
// job read from its stream entry only (queued, never run) were never written. A value is opened with any key k lists, then sealed under the newest;
// a plain value is sealed; a value under the newest key is left alone.
//
// It reads in batches of opts.Batch jobs and writes each batch with one script call a
// partition that replaces a value only while it is still the one read (reseal.lua). So a job
// that moves on meanwhile is skipped, never clobbered, and an interruption loses nothing:
// running it again goes over what is left, and counts what is done as current at the cost
// of a read. With opts.Max a run stops early and answers RotateReport.Cursor; a run given that
// cursor goes on from there, not over what is done. A queued job's entry is replaced by a new
// one at the back of its stream (stream entries cannot change in place); the entries of one run
// keep their order among themselves.
// Jobs a worker holds are counted Running; their outcome is sealed by the worker. Entries
// published after the run started are not read: a publisher given k seals them already.
//
// The outbox's rows are in PostgreSQL: outbox.Rotate re-seals them.
func (i *Inspector) RotateKeys(ctx context.Context, queue string, k *keyring.Keyring, opts RotateOptions) (RotateReport, error) {
	if k == nil {
		return RotateReport{}, invalid("key rotation needs a keyring")
	}
	switch {
	case opts.Batch == 0:
		opts.Batch = DefaultRotateBatch
	case opts.Batch < 0 || opts.Batch > MaxRotateBatch:
		return RotateReport{}, invalid("batch %d is outside 1..%d", opts.Batch, MaxRotateBatch)
	}
	if opts.Max < 0 {
		return RotateReport{}, invalid("max %d is negative", opts.Max)
	}
	at, err := parseRotateCursor(opts.Cursor)
	if err != nil {
		return RotateReport{}, err
	}
	if at != nil && (at.All != (queue == "") || queue != "" && at.Queue != queue) {
		return RotateReport{}, invalid("the cursor is of a run over another queue argument")
	}
	var names []string
	if queue == "" {
		if names, err = i.QueueNames(ctx); err != nil {
			return RotateReport{}, err
		}
	} else {
		if err := i.check(queue, ""); err != nil {
			return RotateReport{}, err
		}
		if err := i.mustExist(ctx, queue); err != nil {
			return RotateReport{}, err
		}
		names = []string{queue}
	}
	if at != nil { // the queues before the cursor's are done; a queue deleted since is skipped
		names = slices.DeleteFunc(names, func(n string) bool { return n < at.Queue })
		if len(names) > 0 && names[0] != at.Queue {
			at = nil
		}
	}
	r := &rotator{s: i.store, k: k, n: opts.Batch, max: opts.Max,
		rep: RotateReport{Key: k.Newest(), Queues: []string{}, Places: map[string]*RotateCounts{}}}
	for _, p := range []string{RotateScheduled, RotateQueued, RotateWaiting, RotateDead, RotateCompleted, RotateCanceled, RotateWorkflowResults, RotateLogs} {
		r.rep.Places[p] = &RotateCounts{}
	}
	for _, name := range names {
		qs, err := i.partitions(ctx, name)
		if err != nil {
			return r.report(), err
		}
		part, step, pos := 0, 0, (*rotatePos)(nil)
		if at != nil {
			part, step, pos = at.Part, at.Step, &at.rotatePos
			at = nil
		}
		for listed := false; part < len(qs); part++ {
			if r.spent() {
				r.rep.Cursor = nextStep{step, pos}.encode(queue == "", name, part)
				return r.report(), nil
			}
			if !listed {
				r.rep.Queues, listed = append(r.rep.Queues, name), true
			}
			next, stopped, err := r.partition(ctx, qs[part], step, pos)
			if err != nil {
				return r.report(), err
			}
			if stopped {
				r.rep.Cursor = next.encode(queue == "", name, part)
				return r.report(), nil
			}
			step, pos = 0, nil
		}
	}
	return r.report(), nil
}

// rotateCursor is where a run that RotateOptions.Max stopped goes on: a queue, a partition of
// it, a step of rotator.partition and a place in that step. It travels as base64 of its JSON.
type rotateCursor struct {
	// All says the run goes through every queue (RotateKeys' queue ""): its cursor goes on
	// only such a run.
	All   bool   `json:"all,omitempty"`
	Queue string `json:"q"`
	Part  int    `json:"p"`
	Step  int    `json:"s"`
	rotatePos
}

// rotatePos is a place within a step: the last member read of a sorted set, a wait list and
// how many of its ids were read, or a stream's last entry read and its last entry when the
// step began (the entries re-sealed are added after it).
type rotatePos struct {
	Score  int64  `json:"sc,omitempty"`
	Member string `json:"m,omitempty"`
	List   string `json:"l,omitempty"`
	Skip   int    `json:"k,omitempty"`
	After  string `json:"a,omitempty"`
	Last   string `json:"z,omitempty"`
}

// nextStep is the position that starts step step: no place within it yet.
type nextStep struct {
	step int
	pos  *rotatePos
}

func (n nextStep) encode(all bool, queue string, part int) string {
	c := rotateCursor{All: all, Queue: queue, Part: part, Step: n.step}
	if n.pos != nil {
		c.rotatePos = *n.pos
	}
	b, _ := json.Marshal(c) // strings and ints only: it always marshals
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseRotateCursor reads a RotateReport.Cursor; nil for "".
func parseRotateCursor(s string) (*rotateCursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	var c rotateCursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Queue == "" || c.Part < 0 || c.Step < 0 || c.Skip < 0 {
		return nil, invalid("the cursor %q is not one a rotation answered", s)
	}
	return &c, nil
}

// rotator is one RotateKeys run: its keyring, batch size, counts, and the items of the batch
// being built.
type rotator struct {
	s       jobstate.Backend
	k       *keyring.Keyring
	n       int
	rep     RotateReport
	pending []rotateItem
	// max bounds the values examined (RotateOptions.Max; 0: no bound), seen counts them.
	max, seen int
}

// spent reports whether the run has examined its RotateOptions.Max values: it stops at the
// next batch's end.
func (r *rotator) spent() bool { return r.max > 0 && r.seen >= r.max }

type rotateItem struct {
	it    jobstate.ResealItem
	place string
	plain bool
}

func (r *rotator) report() RotateReport {
	r.rep.Total = RotateCounts{}
	for _, c := range r.rep.Places {
		r.rep.Total.add(c)
	}
	return r.rep
}

// consider re-seals one stored value in memory and queues its write, or counts it.
func (r *rotator) consider(place string, kind keyring.Kind, jobID string, stored []byte, it jobstate.ResealItem) {
	if out, ok := r.reseal(place, kind, jobID, stored); ok {
		it.Old, it.New = stored, out
		r.pending = append(r.pending, rotateItem{it: it, place: place, plain: !keyring.Sealed(stored)})
	}
}

// considerLogs re-seals the lines of item, the index'th of job jobID's logs at key, and
// queues the write of the whole item, its head as it was.
func (r *rotator) considerLogs(jobID, key string, index int, item string) {
	head, lines, _ := strings.Cut(item, "\n")
	if out, ok := r.reseal(RotateLogs, keyring.Logs, jobID, []byte(lines)); ok {
		it := jobstate.ResealItem{Place: jobstate.InLogs, Key: key, Name: strconv.Itoa(index),
			Old: []byte(item), New: append([]byte(head+"\n"), out...)}
		r.pending = append(r.pending, rotateItem{it: it, place: RotateLogs, plain: !keyring.Sealed([]byte(lines))})
	}
}

// reseal is stored re-sealed, ok when it is to be written; otherwise it counts the value.
func (r *rotator) reseal(place string, kind keyring.Kind, jobID string, stored []byte) (out []byte, ok bool) {
	if len(stored) == 0 || jobID == "" {
		return nil, false
	}
	r.seen++
	c := r.rep.Places[place]
	out, changed, err := r.k.Reseal(kind, jobID, stored)
	if err != nil {
		c.Failed++
		var ke *keyring.KeyError
		if errors.As(err, &ke) && !slices.Contains(c.MissingKeys, ke.KeyID) {
			c.MissingKeys = append(c.MissingKeys, ke.KeyID)
			slices.Sort(c.MissingKeys)
		}
		return nil, false
	}
	if !changed {
		c.Current++
		return nil, false
	}
	return out, true
}

// flush writes the queued items of partition q in one call and counts the answers.
func (r *rotator) flush(ctx context.Context, q keys.Queue) error {
	if len(r.pending) == 0 {
		return nil
	}
	items := make([]jobstate.ResealItem, len(r.pending))
	for k, p := range r.pending {
		items[k] = p.it
	}
	codes, err := r.s.Reseal(ctx, q, items)
	if err != nil {
		return err
	}
	for k, code := range codes {
		p := r.pending[k]
		c := r.rep.Places[p.place]
		switch {
		case code == script.OK && p.plain:
			c.Sealed++
		case code == script.OK:
			c.Resealed++
		case code == script.WrongState:
			c.Running++
		case code == script.NotFound:
			c.Gone++
		default:
			c.MovedOn++
		}
	}
	r.pending = r.pending[:0]
	return nil
}

// partition goes through every place of partition q, from step step at pos (nil: its start).
// It stops when the run is spent (rotator.spent), at a batch's end, and answers where to go on.
func (r *rotator) partition(ctx context.Context, q keys.Queue, step int, pos *rotatePos) (next nextStep, stopped bool, err error) {
	steps := []func(context.Context, keys.Queue, *rotatePos) (*rotatePos, error){
		func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.set(ctx, q, q.Scheduled(), RotateScheduled, false, at)
		},
		func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.set(ctx, q, q.WorkflowWaiting(), RotateWaiting, false, at)
		},
		func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.set(ctx, q, q.Dead(), RotateDead, false, at)
		},
		func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.set(ctx, q, q.Completed(), RotateCompleted, true, at)
		},
		func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.set(ctx, q, q.Canceled(), RotateCanceled, true, at)
		},
		func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.waitLists(ctx, q, q.LimitWaiters(), q.LimitWaiting(""), RotateScheduled, at)
		},
		func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.waitLists(ctx, q, q.GroupsWaiting(), q.GroupWaiting(""), RotateQueued, at)
		},
		r.workflows,
	}
	for l := keys.MinPriority; l <= keys.MaxPriority; l++ {
		steps = append(steps, func(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
			return r.stream(ctx, q, q.LevelStream(l), at)
		})
	}
	for ; step < len(steps); step++ {
		if pos == nil && r.spent() {
			return nextStep{step: step}, true, nil
		}
		at, err := steps[step](ctx, q, pos)
		if err != nil || at != nil {
			return nextStep{step, at}, at != nil, err
		}
		pos = nil
	}
	return nextStep{}, false, nil
}

// set goes through the ids of the sorted set key, by score, from after at (nil: the start);
// chunks when its members are chunks of space-separated ids (the indexes of finished jobs).
// It answers where to go on when the run is spent before the set's end.
func (r *rotator) set(ctx context.Context, q keys.Queue, key, place string, chunks bool, at *rotatePos) (*rotatePos, error) {
	var after *jobstate.SetItem
	if at != nil {
		after = &jobstate.SetItem{Member: at.Member, Score: at.Score}
	}
	for {
		page, err := r.s.SetPage(ctx, key, false, after, r.n)
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, it := range page {
			if chunks {
				ids = append(ids, strings.Fields(it.Member)...)
			} else {
				ids = append(ids, it.Member)
			}
		}
		for len(ids) > 0 {
			b := ids[:min(r.n, len(ids))]
			ids = ids[len(b):]
			if err := r.jobs(ctx, q, b, place); err != nil {
				return nil, err
			}
		}
		if len(page) < r.n {
			return nil, nil
		}
		last := page[len(page)-1]
		after = &last
		if r.spent() {
			return &rotatePos{Score: last.Score, Member: last.Member}, nil
		}
	}
}

// waitLists goes through the wait lists named by the members of set, each at prefix + member,
// from at (nil: the start). It answers where to go on when the run is spent before the end.
func (r *rotator) waitLists(ctx context.Context, q keys.Queue, set, prefix, place string, at *rotatePos) (*rotatePos, error) {
	from, skip := "", 0
	if at != nil {
		from, skip = at.List, at.Skip
	}
	for {
		items, err := r.s.WaitListPage(ctx, set, prefix, from, skip, r.n)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(items))
		for k, it := range items {
			ids[k] = it.ID
		}
		if err := r.jobs(ctx, q, ids, place); err != nil {
			return nil, err
		}
		if len(items) < r.n {
			return nil, nil
		}
		last := items[len(items)-1]
		from, skip = last.List, last.Pos+1
		if r.spent() {
			return &rotatePos{List: from, Skip: skip}, nil
		}
	}
}

// jobs re-seals the payloads and results kept in the hashes of jobs ids of q, and their log
// lines. A payload in a stream entry is the stream's pass's.
func (r *rotator) jobs(ctx context.Context, q keys.Queue, ids []string, place string) error {
	stored, err := r.s.ReadStored(ctx, q, ids)
	if err != nil {
		return err
	}
	for _, j := range stored {
		if !j.Found {
			continue
		}
		if j.Payload != nil {
			r.consider(place, keyring.Payload, j.ID, j.Payload,
				jobstate.ResealItem{Place: jobstate.InJob, Key: q.Job(j.ID), Name: keys.FieldPayload})
		}
		if j.Result != nil {
			r.consider(place, keyring.Result, j.ID, j.Result,
				jobstate.ResealItem{Place: jobstate.InJob, Key: q.Job(j.ID), Name: keys.FieldResult})
		}
		for n, item := range j.Logs {
			r.considerLogs(j.ID, q.Logs(j.ID), n, item)
		}
		if len(r.pending) >= r.n { // a job may hold 20 attempts' lines: the call stays bounded
			if err := r.flush(ctx, q); err != nil {
				return err
			}
		}
	}
	return r.flush(ctx, q)
}

// workflows goes through the task results kept in the hashes of q's workflows and batches,
// from after at (nil: the start). It answers where to go on when the run is spent before the
// end.
func (r *rotator) workflows(ctx context.Context, q keys.Queue, at *rotatePos) (*rotatePos, error) {
	var after *jobstate.SetItem
	if at != nil {
		after = &jobstate.SetItem{Member: at.Member, Score: at.Score}
	}
	for {
		page, err := r.s.SetPage(ctx, q.WorkflowIndex(), false, after, workflowsPage)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(page))
		for k, it := range page {
			ids[k] = it.Member
		}
		res, err := r.s.ReadTaskResults(ctx, q, ids)
		if err != nil {
			return nil, err
		}
		for _, t := range res {
			r.consider(RotateWorkflowResults, keyring.Result, t.JobID, t.Result,
				jobstate.ResealItem{Place: jobstate.InWorkflow, Key: t.Key, Name: t.Field})
			if len(r.pending) >= r.n {
				if err := r.flush(ctx, q); err != nil {
					return nil, err
				}
			}
		}
		if err := r.flush(ctx, q); err != nil {
			return nil, err
		}
		if len(page) < workflowsPage {
			return nil, nil
		}
		last := page[len(page)-1]
		after = &last
		if r.spent() {
			return &rotatePos{Score: last.Score, Member: last.Member}, nil
		}
	}
}

// workflowsPage is how many workflows' hashes one round trip reads whole: a batch's hash holds a
// line of its document for each of its jobs.
const workflowsPage = 10

// stream goes through the entries stream holds when the pass starts (when a run resumes, at:
// the pass's start and its last entry read). Entries a worker has read are counted Running
// without a write; the others are replaced at the back of the stream, so the pass stops at the
// last entry it saw first. It answers where to go on when the run is spent before the end.
func (r *rotator) stream(ctx context.Context, q keys.Queue, stream string, at *rotatePos) (*rotatePos, error) {
	span, err := r.s.ReadSpan(ctx, stream)
	if err != nil || span.Empty {
		return nil, err
	}
	after := ""
	if at != nil && at.Last != "" {
		after, span.Last = at.After, at.Last
	}
	c := r.rep.Places[RotateQueued]
	for {
		es, err := r.s.ReadEntries(ctx, stream, after, span.Last, r.n)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if !entryAfter(e.ID, span.Delivered) {
				if len(e.Payload) > 0 {
					c.Running++
					r.seen++
				}
				continue
			}
			r.consider(RotateQueued, keyring.Payload, e.JobID, e.Payload,
				jobstate.ResealItem{Place: jobstate.InEntry, Key: q.Job(e.JobID), Name: e.ID})
		}
		if err := r.flush(ctx, q); err != nil {
			return nil, err
		}
		if len(es) < r.n {
			return nil, nil
		}
		after = es[len(es)-1].ID
		if r.spent() {
			return &rotatePos{After: after, Last: span.Last}, nil
		}
	}
}

// entryAfter reports whether stream entry id a comes after b.
func entryAfter(a, b string) bool {
	am, as := splitEntryID(a)
	bm, bs := splitEntryID(b)
	return am > bm || am == bm && as > bs
}

func splitEntryID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
