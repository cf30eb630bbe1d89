package torture

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// ClockSkew is how much earlier than its due time a delayed job may start and still not count
// as early. The due time is kept in Redis's milliseconds, and promotion goes by Redis's clock
// (TIME). The handler's start is stamped by the worker's clock. On one host both are the same
// clock, read at different moments and rounded to the millisecond. So a few milliseconds
// cover it. A clock nemesis (a later one) would state its own.
const ClockSkew = 5 // milliseconds

// EndState is what the runner reads of Redis once the run has drained, for the checks that a
// ledger cannot make.
type EndState struct {
	Pending    int64 // entries pending in the queue's consumer group (XPENDING)
	Queued     int64 // gauges of the queue's stats
	InProgress int64
	Scheduled  int64
	Dead       []string // the ids in the dead set
	UniqueKeys int64    // unique keys still held: every job ended, so none may be
	Keys       int64    // keys in the database
	// KeyBound is the most keys the end state may hold: the job records kept for their
	// retention plus a fixed allowance for the queue's own keys (KeysPerQueue).
	KeyBound int64
	// ConcurrencyLimit is the limit on LimitedType's running jobs the run set (0: none), which
	// the checker holds the ledger's attempts of that type to.
	ConcurrencyLimit int
	// Workflows notes workflows whose end status is not the designed one.
	Workflows []string
	// Goroutines notes surviving worker processes whose goroutines grew past the bound, if
	// the runner checked.
	Goroutines []string
	// SealKey is the key every payload and result stored must be sealed under at the end
	// (the encryption workload: NewKey); "" checks none. Then every acknowledged job's
	// Observed record must show its payload under it and opening to the one published, and a
	// completed job's result (the workload echoes the payload) the same.
	SealKey string
	// Sealing notes values of Redis sealed under another key or holding a payload in plain
	// text, and a last rotation that did not finish (the encryption workload).
	Sealing []string
}

// KeysPerQueue is the allowance of keys a queue may hold beside its job records and its
// throughput history. They are its stream, scheduled, dead and completed sets, stats, the
// known-queue set, wake and lock keys, and so on. The count is generous, so that only growth
// with the jobs breaks it.
const KeysPerQueue = 20

// HistoryKeys bounds the throughput history's keys a run of length d leaves. There are
// buckets of 5 s kept an hour and of 1 min kept a day (pipeline.HistoryStepFine and
// HistoryStepCoarse; Inspector.History states the spans). Each is kept for the queue and for all queues. Each has one bucket begun at
// either end of the run. They
// grow with time, not with jobs, and expire with their span.
func HistoryKeys(d time.Duration) int64 {
	buckets := func(step, span time.Duration) int64 { return int64(min(d, span)/step) + 2 }
	return 2 * (buckets(pipeline.HistoryStepFine, time.Hour) + buckets(pipeline.HistoryStepCoarse, 24*time.Hour))
}

// Report is what Check found.
type Report struct {
	Jobs                int // acknowledged jobs
	OK                  int
	Lost                []string
	DuplicateCommits    []string
	DuplicateExecutions int // extra handler starts, over all jobs
	ExecutionBound      int // the extra starts allowed
	Duplicated          []string
	Unexpected          []string
	Early               []string
	WrongOutcome        []string // final status other than the designed one
	Indeterminate       int
	Unwitnessed         int      // final outcomes the ledger has no commit record of (worker killed after the write)
	MaxConcurrent       int      // the most attempts of LimitedType the ledger saw running at once
	Uncounted           int      // attempts of LimitedType not counted: excused, or of no known end (spans)
	OutOfOrder          []string // workflow tasks started before their dependencies allowed
	Garbled             []string // jobs whose handler was handed a payload other than the one published
	Unsealed            []string // jobs whose stored payload or result is not under EndState.SealKey, or opens to another
	Violations          []string
}

// Failed reports whether the run broke an invariant.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// Check classifies every job of the ledger recs and checks the end state. bound is the number
// of duplicate executions the run's faults allow.
func Check(recs []Record, end EndState, bound int) Report {
	type job struct {
		ack, indet     bool
		due            int64
		expect         string
		need           int
		typ            string
		after          []string
		finally        bool
		starts         []Record
		finishes       []Record
		commits        []Record
		observed       string
		observedAtt    int
		observedExists bool
		sum            string // the published payload's digest
		obs            Record // the Observed record
	}
	jobs := map[string]*job{}
	get := func(id string) *job {
		j := jobs[id]
		if j == nil {
			j = &job{}
			jobs[id] = j
		}
		return j
	}
	leases := map[int]*leaseEvents{}
	var conts []Record
	for _, r := range recs {
		switch r.Kind {
		case Kill, Stop, LeaseLost:
			ev := leases[r.PID]
			if ev == nil {
				ev = &leaseEvents{}
				leases[r.PID] = ev
			}
			ev.add(r)
			continue
		case Cont:
			conts = append(conts, r)
			continue
		}
		j := get(r.ID)
		switch r.Kind {
		case Ack:
			j.ack, j.due, j.expect, j.need, j.typ = true, r.Due, r.Expect, max(r.Need, 1), r.Type
			j.after, j.finally, j.sum = r.After, r.Finally, r.Sum
		case Indeterminate:
			j.indet = true
		case Start:
			j.starts = append(j.starts, r)
		case Finish:
			j.finishes = append(j.finishes, r)
		case Commit:
			j.commits = append(j.commits, r)
		case Observed:
			j.observed, j.observedAtt, j.observedExists, j.obs = r.Outcome, r.Attempt, true, r
		}
	}
	rep := Report{ExecutionBound: bound}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	expectedDead := map[string]bool{}
	for _, id := range ids {
		j := jobs[id]
		if !j.ack {
			if j.indet {
				rep.Indeterminate++
			} else if len(j.starts) > 0 || len(j.commits) > 0 {
				rep.Unexpected = append(rep.Unexpected, id)
			}
			continue
		}
		rep.Jobs++
		if j.expect == "failed" {
			expectedDead[id] = true
		}
		final := 0
		for _, c := range j.commits {
			if c.Outcome == "completed" || c.Outcome == "dead" {
				final++
			}
		}
		good := true
		switch {
		case j.expect == "canceled" && j.observed == "canceled":
			if len(j.starts) > 0 {
				rep.WrongOutcome = append(rep.WrongOutcome, id)
				good = false
			}
		case j.observed != "completed" && j.observed != "failed":
			rep.Lost = append(rep.Lost, id)
			good = false
		case j.observed != cmp.Or(j.expect, "completed"):
			rep.WrongOutcome = append(rep.WrongOutcome, id)
			good = false
		}
		if final > 1 {
			rep.DuplicateCommits = append(rep.DuplicateCommits, id)
			good = false
		}
		if final == 0 && good && j.expect != "canceled" {
			rep.Unwitnessed++
		}
		if extra := len(j.starts) - j.need; extra > 0 {
			rep.DuplicateExecutions += extra
			rep.Duplicated = append(rep.Duplicated, id)
		}
		if j.due > 0 {
			for _, s := range j.starts {
				if s.At/1000 < j.due-ClockSkew {
					rep.Early = append(rep.Early, id)
					good = false
					break
				}
			}
		}
		if j.sum != "" && slices.ContainsFunc(j.starts, func(s Record) bool { return s.Sum != j.sum }) {
			rep.Garbled = append(rep.Garbled, id)
			good = false
		}
		if end.SealKey != "" && j.observedExists && j.observed != "missing" && !sealedAsPublished(j.obs, j.sum, end.SealKey) {
			rep.Unsealed = append(rep.Unsealed, id)
			good = false
		}
		if good {
			rep.OK++
		}
	}
	v := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	if len(rep.Lost) > 0 {
		v("%d lost (acknowledged, never committed): %s", len(rep.Lost), some(rep.Lost, func(id string) string {
			return fmt.Sprintf("%s (observed %s, %d starts)", id, cmp.Or(jobs[id].observed, "nothing"), len(jobs[id].starts))
		}))
	}
	if len(rep.DuplicateCommits) > 0 {
		v("%d committed twice: %s", len(rep.DuplicateCommits), some(rep.DuplicateCommits, func(id string) string {
			var cs []string
			for _, c := range jobs[id].commits {
				cs = append(cs, fmt.Sprintf("%s@%d by pid %d", c.Outcome, c.Attempt, c.PID))
			}
			return id + " (" + strings.Join(cs, ", ") + ")"
		}))
	}
	if rep.DuplicateExecutions > bound {
		v("%d duplicate executions, over the bound of %d: %s", rep.DuplicateExecutions, bound, some(rep.Duplicated, nil))
	}
	if len(rep.Unexpected) > 0 {
		v("%d unexpected (run or committed, never published): %s", len(rep.Unexpected), some(rep.Unexpected, nil))
	}
	if len(rep.Early) > 0 {
		v("%d started early (before due - %d ms): %s", len(rep.Early), ClockSkew, some(rep.Early, func(id string) string {
			return fmt.Sprintf("%s (due %d, first start %d ms)", id, jobs[id].due, jobs[id].starts[0].At/1000)
		}))
	}
	if len(rep.WrongOutcome) > 0 {
		v("%d ended otherwise than designed: %s", len(rep.WrongOutcome), some(rep.WrongOutcome, func(id string) string {
			return fmt.Sprintf("%s (%s, want %s)", id, jobs[id].observed, cmp.Or(jobs[id].expect, "completed"))
		}))
	}
	if len(rep.Garbled) > 0 {
		v("%d handed a payload other than the one published: %s", len(rep.Garbled), some(rep.Garbled, func(id string) string {
			var sums []string
			for _, s := range jobs[id].starts {
				sums = append(sums, fmt.Sprintf("%d:%s", s.Attempt, cmp.Or(s.Sum, "none")))
			}
			return fmt.Sprintf("%s (published %s, handed %s)", id, jobs[id].sum, strings.Join(sums, ", "))
		}))
	}
	if len(rep.Unsealed) > 0 {
		v("%d stored otherwise than under key %s: %s", len(rep.Unsealed), end.SealKey, some(rep.Unsealed, func(id string) string {
			o := jobs[id].obs
			return fmt.Sprintf("%s (%s: payload under %s opening to %s, result under %s opening to %s; published %s)", id, o.Outcome,
				cmp.Or(o.Key, "nothing"), cmp.Or(o.Sum, "nothing"), cmp.Or(o.ResultKey, "nothing"), cmp.Or(o.ResultSum, "nothing"), jobs[id].sum)
		}))
	}
	for _, s := range end.Sealing {
		v("sealing: %s", s)
	}
	for _, id := range ids {
		if j := jobs[id]; j.ack {
			rep.OutOfOrder = append(rep.OutOfOrder, outOfOrder(id, j.after, j.finally, j.starts, func(dep string) (int64, bool) {
				d := jobs[dep]
				if d == nil || (!j.finally && d.observed != "completed") {
					return 0, false
				}
				return finalFinish(d.finishes, d.observed, d.need)
			})...)
		}
	}
	if len(rep.OutOfOrder) > 0 {
		v("%d workflow tasks started before their dependencies ended: %s", len(rep.OutOfOrder), some(rep.OutOfOrder, nil))
	}
	for _, w := range end.Workflows {
		v("workflow: %s", w)
	}
	if end.ConcurrencyLimit > 0 {
		for _, c := range conts {
			leases[c.PID].resumed(c.At)
		}
		var limited []attemptSpan
		for _, id := range ids {
			if j := jobs[id]; j.ack && j.typ == LimitedType {
				ss := spans(id, j.starts, j.finishes, leases)
				limited = append(limited, ss...)
				rep.Uncounted += len(j.starts) - len(ss)
			}
		}
		most, at, who := maxOverlap(limited)
		rep.MaxConcurrent = most
		if most > end.ConcurrencyLimit {
			v("%d attempts of %s ran at once (limit %d) at %d µs: %s", most, LimitedType, end.ConcurrencyLimit, at, some(who, nil))
		}
	}
	if end.Pending != 0 {
		v("%d entries still pending at the end", end.Pending)
	}
	if end.Queued != 0 || end.InProgress != 0 || end.Scheduled != 0 {
		v("jobs left over at the end: %d queued, %d in progress, %d scheduled", end.Queued, end.InProgress, end.Scheduled)
	}
	var extraDead, missingDead []string
	dead := map[string]bool{}
	for _, id := range end.Dead {
		dead[id] = true
		if !expectedDead[id] {
			extraDead = append(extraDead, id)
		}
	}
	for id := range expectedDead {
		if !dead[id] {
			missingDead = append(missingDead, id)
		}
	}
	slices.Sort(missingDead)
	if len(extraDead) > 0 || len(missingDead) > 0 {
		v("the dead set is not the expected one: %d there unexpectedly %s, %d expected missing %s",
			len(extraDead), some(extraDead, nil), len(missingDead), some(missingDead, nil))
	}
	if end.UniqueKeys != 0 {
		v("%d unique keys still held at the end, every job having ended", end.UniqueKeys)
	}
	if end.KeyBound > 0 && end.Keys > end.KeyBound {
		v("%d keys at the end, over the bound of %d", end.Keys, end.KeyBound)
	}
	for _, g := range end.Goroutines {
		v("goroutines: %s", g)
	}
	return rep
}

// sealedAsPublished reports whether a job's Observed record shows its payload sealed under
// key and opening to sum, and, when it completed, its result the same (the encryption
// workload's handler echoes its payload).
func sealedAsPublished(o Record, sum, key string) bool {
	if o.Key != key || o.Sum == "" || (sum != "" && o.Sum != sum) {
		return false
	}
	if o.Outcome == "completed" {
		return o.ResultKey == key && o.ResultSum == o.Sum
	}
	return o.ResultKey == "" || (o.ResultKey == key && o.ResultSum == o.Sum)
}

// outOfOrder checks a workflow task's starts against its dependencies (after). Each start
// must come after the finish record of every dependency's final attempt (finalAt). That
// record was written before the outcome was stored, so before the task could be released.
// A task that is not Finally needs its dependencies completed; a Finally task only final (a
// canceled dependency, which never ran, has no time to wait for).
func outOfOrder(id string, after []string, finally bool, starts []Record, finalAt func(dep string) (int64, bool)) []string {
	var out []string
	for _, s := range starts {
		for _, dep := range after {
			at, ok := finalAt(dep)
			switch {
			case !ok && !finally:
				out = append(out, fmt.Sprintf("%s@%d (%s never finished)", id, s.Attempt, dep))
			case ok && s.At < at:
				out = append(out, fmt.Sprintf("%s@%d at %d µs (%s final at %d µs)", id, s.Attempt, s.At, dep, at))
			}
		}
	}
	return out
}

// finalFinish is when the attempt that made a job final finished, by its finish records. For
// a completed job it is the first that succeeded. For a dead one it is the first failure of
// its last allowed attempt. It is false for a job that ended otherwise or has no such record.
func finalFinish(finishes []Record, observed string, need int) (int64, bool) {
	for _, f := range finishes {
		if (observed == "completed" && f.Outcome == "ok") || (observed == "failed" && f.Outcome == "error" && f.Attempt >= need) {
			return f.At, true
		}
	}
	return 0, false
}

// attemptSpan is one attempt's time in its handler, by the ledger.
type attemptSpan struct {
	name       string // id@attempt
	start, end int64  // unix µs
}

// spans are a job's attempts of LimitedType as the limit counted them, by the ledger, its
// workers' signals and their warnings (leases). Each span must lie within its slot's hold:
// then an overlap of spans is one of slots, never invented.
//
// A slot is taken before the handler starts. The worker gives it back after the handler's
// finish record. Else Redis takes it back once the worker's lease ran out: a lease (2 s)
// after the worker's last call. The worker admits jobs from leased slots in memory and
// renews from its keeper. So its last call may come well before an attempt's start (a
// starved keeper, a kill). Start + lease bounds nothing.
//
// Redis takes back nothing of a worker that is alive and calling. A lease runs out only in a
// silence of a whole lease. The worker hears of it at its next call and logs so (LeaseLost).
// A SIGKILLed or SIGSTOPped worker makes no call after the signal. The runner then reads
// whether its lease is in Redis ("held"). If so, it had not run out: only the worker makes
// it anew, and that call logs the warning. A warning between the signal and the read voids
// the read.
//
// So a span ends at the earliest of its finish record, the job's next start, and the next
// kill or stop of its process (stamped before the signal). With none of them, we cannot say
// when it ended: it does not count. Ending a span early only misses overlaps.
//
// An attempt is excused (not counted) when its slot may have gone before. That is when, at or
// after its start, its process lost its lease before any later "held" signal. A loss is a
// warning, or a signal without the lease held. The loss came before its warning, by an
// unknown time. An attempt is also excused when it started after a stop of its process. The
// stop outlasts the lease, and the process admits from slots it no longer holds. That lasts
// until the warning that surely followed the resume (LogTick).
//
// Not covered: a worker killed or frozen between the reply that says its lease was lost and
// its log line. Nor a reply read so late that a later call had made the lease anew.
func spans(id string, starts, finishes []Record, leases map[int]*leaseEvents) []attemptSpan {
	out := make([]attemptSpan, 0, len(starts))
	for _, s := range starts {
		ev := leases[s.PID]
		if ev.excused(s.At) {
			continue
		}
		end := int64(-1)
		for _, f := range finishes {
			if f.Attempt == s.Attempt && f.PID == s.PID && f.At >= s.At {
				end = f.At
				break
			}
		}
		for _, next := range starts {
			if next.At > s.At && (end < 0 || next.At < end) {
				end = next.At
			}
		}
		if cut, ok := ev.cut(s.At); ok && (end < 0 || cut < end) {
			end = cut
		}
		if end < 0 {
			continue
		}
		out = append(out, attemptSpan{name: fmt.Sprintf("%s@%d", id, s.Attempt), start: s.At, end: end})
	}
	return out
}

// leaseEvents are the Kill, Stop, Cont and LeaseLost records of one worker process (unix µs).
type leaseEvents struct {
	signals []signal
	warned  []int64 // its warnings (LeaseLost)
}

// signal is a kill or a stop: when, whether the lease was found held after it, and the
// resume of a stop (math.MaxInt64: none, or a kill).
type signal struct {
	at, resume int64
	stop, held bool
}

func (ev *leaseEvents) add(r Record) {
	if r.Kind == LeaseLost {
		ev.warned = append(ev.warned, r.At)
		return
	}
	ev.signals = append(ev.signals, signal{at: r.At, resume: math.MaxInt64, stop: r.Kind == Stop, held: r.Outcome == "held"})
}

// resumed records a resume at c: the end of the latest stop before it still open.
func (ev *leaseEvents) resumed(c int64) {
	if ev == nil {
		return
	}
	k := -1
	for i, sg := range ev.signals {
		if sg.stop && sg.at <= c && sg.resume == math.MaxInt64 && (k < 0 || sg.at > ev.signals[k].at) {
			k = i
		}
	}
	if k >= 0 {
		ev.signals[k].resume = c
	}
}

// heldAt reports whether sg shows the lease held at sg.at. A warning between the signal and
// the process's death or resume voids it: the lease read may have been made anew.
func (ev *leaseEvents) heldAt(sg signal) bool {
	return sg.held && !slices.ContainsFunc(ev.warned, func(w int64) bool { return w >= sg.at && w-LogTick <= sg.resume })
}

// excused reports whether an attempt of the process started at s may have run without its
// slot (spans).
func (ev *leaseEvents) excused(s int64) bool {
	if ev == nil {
		return false
	}
	heldIn := func(from, to int64) bool {
		return slices.ContainsFunc(ev.signals, func(sg signal) bool { return from <= sg.at && sg.at < to && ev.heldAt(sg) })
	}
	for _, w := range ev.warned {
		if s <= w && !heldIn(s, w) {
			return true
		}
	}
	for _, sg := range ev.signals {
		if !ev.heldAt(sg) && s <= sg.at && !heldIn(s, sg.at) {
			return true
		}
		// A warning ends a stop's excuse once it surely came after the resume, and before s.
		if sg.stop && sg.at < s && !slices.ContainsFunc(ev.warned, func(w int64) bool { return w-LogTick > sg.resume && w < s }) {
			return true
		}
	}
	return false
}

// cut returns the process's first kill or stop at or after s.
func (ev *leaseEvents) cut(s int64) (int64, bool) {
	if ev == nil {
		return 0, false
	}
	first, ok := int64(0), false
	for _, sg := range ev.signals {
		if sg.at >= s && (!ok || sg.at < first) {
			first, ok = sg.at, true
		}
	}
	return first, ok
}

// maxOverlap returns the most spans open at once, when (the latest start that made it so) and
// which. A span ending when another starts does not overlap it.
func maxOverlap(ss []attemptSpan) (most int, at int64, who []string) {
	type event struct {
		t     int64
		delta int
		i     int
	}
	evs := make([]event, 0, 2*len(ss))
	for i, s := range ss {
		if s.end > s.start {
			evs = append(evs, event{s.start, 1, i}, event{s.end, -1, i})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.delta, b.delta)) })
	open := map[int]bool{}
	for _, e := range evs {
		if e.delta < 0 {
			delete(open, e.i)
			continue
		}
		open[e.i] = true
		if len(open) > most {
			most, at, who = len(open), e.t, who[:0]
			for i := range open {
				who = append(who, ss[i].name)
			}
			slices.Sort(who)
		}
	}
	return most, at, who
}

// some renders up to 10 ids, each with describe's words when given.
func some(ids []string, describe func(string) string) string {
	const most = 10
	var parts []string
	for i, id := range ids {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-most))
			break
		}
		if describe != nil {
			id = describe(id)
		}
		parts = append(parts, id)
	}
	return strings.Join(parts, ", ")
}
