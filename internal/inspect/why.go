package inspect

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

// Why a job is not running (docs/STATE_MACHINE.md, "Why a job is not running"). A reason is
// derived when a job is read, from its record and from facts of its queue read for that very
// read (jobstate.ReadWaitFacts). No script on a job's path writes one, except admit.lua's rate
// mark in the HSET that defers the job anyway.

// Wait is a job's reason, pipeline.WaitingFor's fields (the Inspector converts it).
type Wait struct {
	Kind        status.Reason
	Detail      string
	Cause       string
	Until       time.Time
	Scope       string
	Held, Slots int
	Group       string
	Position    int
	Tasks       []string
	Jobs        int64
}

// Readers is what the live workers' heartbeats say of a queue: whether any reads it, and the
// job types those that do handle.
type Readers struct {
	// Any: some live worker reads the queue.
	Any bool
	// AllTypes: one of them lists no types (a version before types were written), so it
	// counts as handling every type.
	AllTypes bool
	// Types are the types the readers handle.
	Types map[string]bool
}

// Handles reports whether a reader handles jobs of type typ.
func (r Readers) Handles(typ string) bool { return r.AllTypes || r.Types[typ] }

// AddReader counts a live worker that reads the queue and handles types (none: every type).
func (r *Readers) AddReader(types []string) {
	r.Any = true
	if len(types) == 0 {
		r.AllTypes = true
		return
	}
	if r.Types == nil {
		r.Types = map[string]bool{}
	}
	for _, t := range types {
		r.Types[t] = true
	}
}

// JobFacts are the facts one job's reason is derived from besides its record.
type JobFacts struct {
	// Now is Redis's clock at the read.
	Now     time.Time
	Paused  bool
	Readers Readers
	// Limit is the limit of the instance a job waiting for a slot waits for (rec.LimitWait);
	// nil when that scope has no concurrency limit now. Held is its slots taken.
	Limit *jobstate.Limit
	Held  int64
	// Position is a group-waiting job's place in its group's list, 1 first; 0 unknown.
	Position int
	// Ahead counts the undelivered jobs of the levels before a stream-queued job's.
	Ahead int64
	// Outcomes are the outcomes of the tasks of a waiting task's workflow, by name.
	Outcomes map[string]string
}

// Why derives the reason job rec of queue waits, or nil when it is not waiting (running, or
// ended). The reasons are checked in status.Reasons' order: the first that holds is the
// job's. Where the job is (its status, and its list or set) decides which can hold.
func Why(queue string, rec *jobstate.Record, f JobFacts) *Wait {
	switch status.Status(rec.Status) {
	case status.Waiting:
		tasks := pendingTasks(rec, f.Outcomes)
		w := &Wait{Kind: status.Dependencies, Tasks: tasks}
		switch {
		case len(tasks) == 0:
			w.Detail = "waiting for its workflow to release it"
		case len(tasks) == 1:
			w.Detail = "waiting for task " + tasks[0]
		default:
			w.Detail = "waiting for tasks " + joinShort(tasks, 10)
		}
		return w
	case status.Scheduled:
		return whyScheduled(queue, rec, f)
	case status.Queued:
		return whyQueued(queue, rec, f)
	}
	return nil
}

func whyScheduled(queue string, rec *jobstate.Record, f JobFacts) *Wait {
	if rec.LimitWait != "" {
		w := &Wait{Kind: status.ConcurrencyLimit, Scope: LimitScope(rec.LimitWait), Held: int(f.Held)}
		if f.Limit != nil && f.Limit.Concurrency > 0 {
			w.Slots = int(f.Limit.Concurrency)
			w.Detail = fmt.Sprintf("concurrency limit of %s: %d of %d slots held", w.Scope, w.Held, w.Slots)
		} else {
			w.Detail = fmt.Sprintf("a slot of %s (%d held; it has no concurrency limit now: the next slot given back wakes it)", w.Scope, w.Held)
		}
		return w
	}
	due := rec.RunAt
	if !f.Readers.Any && !due.After(f.Now) {
		return &Wait{Kind: status.NoReader, Until: due,
			Detail: fmt.Sprintf("no live worker reads queue %s (due since %s)", queue, stamp(due))}
	}
	if f.Readers.Any && !f.Readers.Handles(rec.Type) {
		// Due or not, no live worker can run it: a worker that reads it fails the attempt
		// (pipeline.ErrNoHandler), and its retries wait here in turn until it is dead.
		return noHandler(queue, rec, f)
	}
	if inst, ok := rateMark(rec); ok {
		scope := LimitScope(inst)
		return &Wait{Kind: status.RateLimit, Scope: scope, Until: due,
			Detail: fmt.Sprintf("rate limit of %s until %s", scope, stamp(due))}
	}
	if rec.Debounce != "" && rec.ScheduledFor == "" && rec.StartedAt.IsZero() {
		return &Wait{Kind: status.Debounce, Until: due, Detail: "debounce window until " + stamp(due)}
	}
	cause, words := "delay", "delay"
	switch rec.ScheduledFor {
	case "retry":
		cause, words = "retry", "retry backoff"
	case "snooze":
		cause, words = "snooze", "snooze"
	}
	return &Wait{Kind: status.Due, Cause: cause, Until: due, Detail: fmt.Sprintf("due at %s (%s)", stamp(due), words)}
}

func whyQueued(queue string, rec *jobstate.Record, f JobFacts) *Wait {
	if GroupWaiting(rec) {
		w := &Wait{Kind: status.GroupWindow, Group: rec.Group, Position: f.Position}
		w.Detail = fmt.Sprintf("group %s's window is full", rec.Group)
		if f.Position > 0 {
			w.Detail += fmt.Sprintf(" (position %d in its wait list)", f.Position)
		}
		return w
	}
	switch {
	case !f.Readers.Any:
		return &Wait{Kind: status.NoReader, Detail: "no live worker reads queue " + queue}
	case f.Paused:
		return &Wait{Kind: status.Paused, Detail: "queue " + queue + " is paused"}
	case !f.Readers.Handles(rec.Type):
		return noHandler(queue, rec, f)
	case f.Ahead > 0:
		return &Wait{Kind: status.Priority, Jobs: f.Ahead, Detail: fmt.Sprintf("behind %d jobs of a higher priority", f.Ahead)}
	}
	return &Wait{Kind: status.Ready, Detail: "ready: the next free worker slot takes it"}
}

func noHandler(queue string, rec *jobstate.Record, f JobFacts) *Wait {
	return &Wait{Kind: status.NoHandler, Detail: fmt.Sprintf("no live worker of queue %s handles type %s (they handle %s)",
		queue, rec.Type, joinShort(slices.Sorted(mapKeys(f.Readers.Types)), 5))}
}

// GroupWaiting reports whether a queued job waits in its fair group's list: queued with no
// stream entry (lua/groups.lua).
func GroupWaiting(rec *jobstate.Record) bool {
	return status.Status(rec.Status) == status.Queued && rec.Group != "" && rec.Entry == ""
}

// rateMark is the rate instance of a job's rate mark (keys.FieldRateWait) when it is the
// job's own now: the job is due at the time the mark names.
func rateMark(rec *jobstate.Record) (string, bool) {
	ms, inst, ok := strings.Cut(rec.RateWait, " ")
	if !ok || inst == "" {
		return "", false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	return inst, err == nil && n == rec.RunAt.UnixMilli()
}

// pendingTasks names the dependencies of a waiting task that do not let it run yet: not
// completed, or for a Finally task not final.
func pendingTasks(rec *jobstate.Record, outcomes map[string]string) []string {
	var out []string
	for _, n := range TaskNames(rec.WfDeps) {
		o := outcomes[n]
		done := o == "C"
		if rec.WfFinally {
			done = o == "C" || o == "F" || o == "X"
		}
		if !done {
			out = append(out, n)
		}
	}
	return out
}

// TaskNames are the names of workflow task ids ("<workflow id>.<name>").
func TaskNames(ids []string) []string {
	out := make([]string, len(ids))
	for k, id := range ids {
		out[k] = id[strings.LastIndexByte(id, '.')+1:]
	}
	return out
}

// LimitScope names a limit's scope instance as `conveyor limits list` shows it: 'q' is
// "queue", 't:T' "type T", 'qk:K' "key K", 'tk:T K' "type T key K".
func LimitScope(inst string) string {
	switch {
	case inst == "q":
		return "queue"
	case strings.HasPrefix(inst, "t:"):
		return "type " + inst[2:]
	case strings.HasPrefix(inst, "qk:"):
		return "key " + inst[3:]
	case strings.HasPrefix(inst, "tk:"):
		typ, key, _ := strings.Cut(inst[3:], " ")
		return "type " + typ + " key " + key
	}
	return inst
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// joinShort joins names with ", ", the first n and how many more.
func joinShort(names []string, n int) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// ---- The facts, read ----

// Waiter is a job whose reason is asked: the partition that holds it, and its record.
type Waiter struct {
	Q   keys.Queue
	Rec *jobstate.Record
	ID  string
}

// Reasons derives the reason of each of jobs, all of queue, with the facts they need read
// in one pipeline; out[k] is nil for a job that is not waiting. Nothing is read when none is.
func (e *Engine) Reasons(ctx context.Context, queue string, jobs []Waiter, readers Readers) ([]*Wait, error) {
	out := make([]*Wait, len(jobs))
	ask := jobstate.WaitAsk{Queue: queue}
	part := map[string]int{} // partition name -> index in ask.Parts
	at := make([]int, len(jobs))
	any := false
	for k, j := range jobs {
		at[k] = -1
		st := status.Status(j.Rec.Status)
		if !st.Waits() {
			continue
		}
		any = true
		n, ok := part[j.Q.Base()]
		if !ok {
			n = len(ask.Parts)
			part[j.Q.Base()] = n
			ask.Parts = append(ask.Parts, jobstate.PartAsk{Q: j.Q})
		}
		at[k] = n
		pa := &ask.Parts[n]
		switch {
		case st == status.Waiting && j.Rec.WorkflowKey != "":
			if pa.Workflows == nil {
				pa.Workflows = map[string][]string{}
			}
			for _, name := range TaskNames(j.Rec.WfDeps) {
				if !slices.Contains(pa.Workflows[j.Rec.WorkflowKey], name) {
					pa.Workflows[j.Rec.WorkflowKey] = append(pa.Workflows[j.Rec.WorkflowKey], name)
				}
			}
		case st == status.Scheduled && j.Rec.LimitWait != "":
			if !slices.Contains(pa.Instances, j.Rec.LimitWait) {
				pa.Instances = append(pa.Instances, j.Rec.LimitWait)
			}
		case GroupWaiting(j.Rec):
			pa.Grouped = append(pa.Grouped, jobstate.GroupedJob{Group: j.Rec.Group, ID: j.ID})
		case st == status.Queued:
			pa.Levels = true
		}
	}
	if !any {
		return out, nil
	}
	facts, err := jobstate.ReadWaitFacts(ctx, e.store.Client(), e.prefix, ask)
	if err != nil {
		return nil, fmt.Errorf("read why the jobs of %s wait: %w", queue, err)
	}
	for k, j := range jobs {
		if at[k] < 0 {
			continue
		}
		pf := &facts.Parts[at[k]]
		f := JobFacts{Now: facts.Now, Paused: facts.Paused, Readers: readers, Position: pf.Positions[j.ID],
			Outcomes: pf.Outcomes[j.Rec.WorkflowKey]}
		if inst := j.Rec.LimitWait; inst != "" {
			if l, ok := pf.Limits[inst]; ok {
				f.Limit = &l
			}
			f.Held = pf.Held[inst]
		}
		for l := keys.MinPriority; l < max(j.Rec.Priority, keys.MinPriority); l++ {
			f.Ahead += pf.Undelivered[l-1]
		}
		out[k] = Why(queue, j.Rec, f)
	}
	return out, nil
}

// ---- Counts by reason ----

// QueueFacts are the facts a queue's counts by reason are split by, besides its gauges.
type QueueFacts struct {
	Readers Readers
	Paused  bool
	// Overdue counts the scheduled set's jobs due already; Behind the stream-queued jobs of
	// levels after each partition's first non-empty one.
	Overdue, Behind int64
}

// Counts splits a queue's gauges by reason (QueueStats.WaitingFor), the reasons that have
// any. No job is read, so the split is coarser than the jobs' own reasons: the scheduled
// set's jobs count as due (no_worker_queue once due with no live reader), rate-limited and
// debounced ones among them included; the stream's as no_worker_queue, paused, priority or
// ready, never no_worker_type, which needs each job's type.
func Counts(st *jobstate.Stats, f QueueFacts) map[status.Reason]int64 {
	out := map[status.Reason]int64{}
	add := func(r status.Reason, n int64) {
		if n > 0 {
			out[r] += n
		}
	}
	add(status.Dependencies, st.Waiting)
	add(status.ConcurrencyLimit, st.LimitWaiting)
	add(status.GroupWindow, st.GroupWaiting)
	set := max(0, st.Scheduled-st.LimitWaiting)
	if !f.Readers.Any {
		over := min(f.Overdue, set)
		add(status.NoReader, over)
		set -= over
	}
	add(status.Due, set)
	stream := max(0, st.Queued-st.GroupWaiting)
	switch {
	case !f.Readers.Any:
		add(status.NoReader, stream)
	case f.Paused:
		add(status.Paused, stream)
	default:
		behind := min(max(f.Behind, 0), stream)
		add(status.Priority, behind)
		add(status.Ready, stream-behind)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// behind counts the undelivered jobs of the levels after the first non-empty one.
func behind(u [keys.MaxPriority]int64) int64 {
	var n int64
	first := true
	for _, c := range u {
		if c <= 0 {
			continue
		}
		if first {
			first = false
			continue
		}
		n += c
	}
	return n
}

// CountReasons fills the counts by reason of stats (one per queue, summed over its
// partitions, Paused set), with readers[k] the live readers of stats[k]'s queue. Where the
// gauges alone do not split, it reads, in one pipeline per statsChunk partitions and for
// those queues only, the scheduled set's due jobs (a queue no live worker reads, with
// scheduled jobs) or the streams' undelivered entries by level (a read queue, not paused,
// with jobs in its streams); no job. An idle queue, or one whose gauges say it all, costs
// nothing more.
func (e *Engine) CountReasons(ctx context.Context, stats []*jobstate.Stats, readers []Readers, now time.Time) error {
	facts := make([]QueueFacts, len(stats))
	var need []int // the stats that need a read
	for k, st := range stats {
		facts[k].Readers, facts[k].Paused = readers[k], st.Paused
		if ask := countsNeed(st, facts[k]); ask.Levels || !ask.OverdueBy.IsZero() {
			need = append(need, k)
		}
	}
	if len(need) > 0 {
		names := make([]string, len(need))
		for n, k := range need {
			names[n] = stats[k].Queue
		}
		counts, err := e.store.PartitionCounts(ctx, names)
		if err != nil {
			return fmt.Errorf("count why jobs wait: %w", err)
		}
		var asks []jobstate.PartAsk
		var owner []int
		for n, k := range need {
			ask := countsNeed(stats[k], facts[k])
			if !ask.OverdueBy.IsZero() {
				ask.OverdueBy = now
			}
			for _, q := range allPartitions(e.prefix, stats[k].Queue, counts[n]) {
				ask.Q = q
				asks = append(asks, ask)
				owner = append(owner, k)
			}
		}
		for start := 0; start < len(asks); start += statsChunk {
			end := min(start+statsChunk, len(asks))
			f, err := jobstate.ReadWaitFacts(ctx, e.store.Client(), e.prefix, jobstate.WaitAsk{Parts: asks[start:end]})
			if err != nil {
				return fmt.Errorf("count why jobs wait: %w", err)
			}
			for i, pf := range f.Parts {
				qf := &facts[owner[start+i]]
				qf.Overdue += pf.Overdue
				qf.Behind += behind(pf.Undelivered)
			}
		}
	}
	for k, st := range stats {
		st.WaitingFor = Counts(st, facts[k])
	}
	return nil
}

// countsNeed is what Counts needs read of a queue besides its gauges (Q unset; OverdueBy any
// non-zero time when the due jobs are needed): neither Levels nor OverdueBy when nothing.
func countsNeed(st *jobstate.Stats, f QueueFacts) jobstate.PartAsk {
	var ask jobstate.PartAsk
	if !f.Readers.Any && st.Scheduled-st.LimitWaiting > 0 {
		ask.OverdueBy = time.Unix(1, 0)
	}
	if f.Readers.Any && !f.Paused && st.Queued-st.GroupWaiting > 0 {
		ask.Levels = true
	}
	return ask
}
