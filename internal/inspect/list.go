package inspect

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

// Row is a job of a listing: its record as the store read it.
type Row struct {
	// Queue is the queue's name (a partition's is its queue's).
	Queue string
	// Part is the queue or partition whose keys hold the job: where its reason's facts are.
	Part keys.Queue
	ID   string
	Rec  jobstate.Record
	// Held, for an in_progress row, is the worker's lease on the entry the job runs on.
	Held *jobstate.Lease
	// Attempt, for an in_progress row, is the attempt its entry starts (0: the record's).
	Attempt int
}

// entry is the stream entry the row's job is on: a stream listing's cursor.
func (r *Row) entry() string {
	if r.Held != nil {
		return r.Held.Entry
	}
	return r.Rec.Entry
}

// size is what a job costs a page's budget: its payload and result.
func (r *Row) size() int64 { return int64(len(r.Rec.Payload) + len(r.Rec.Result)) }

// Page is one page of List.
type Page struct {
	Rows []Row
	// Next is the cursor of the next page; empty when this page is the last.
	Next string
}

// pageBudget is what is left of a page's byte budget while List fills it.
type pageBudget struct{ left int64 }

// spent reports that the page is full by bytes: no further job goes in.
func (b *pageBudget) spent() bool { return b.left <= 0 }

// take counts n bytes of a job that went into the page.
func (b *pageBudget) take(n int64) { b.left -= n }

// List returns a page of the jobs of queue that have status st, from cursor. The page holds at
// most limit jobs (1..pipeline's maxPageLimit) and ends with the job that spends budget bytes (above 0).
// The caller checks st is listable; pipeline.Inspector.List documents the orders and cursors.
func (e *Engine) List(ctx context.Context, queue string, st status.Status, cursor string, limit int, budget int64) (*Page, error) {
	// A malformed cursor is the caller's mistake whether or not Redis answers. Refuse it
	// before reading the partition count (which says which of the two forms it must be).
	if !cursorShape(st, cursor) {
		return nil, e.invalid("cursor %q is not one of a %s listing", cursor, st)
	}
	qs, err := e.partitions(ctx, queue)
	if err != nil {
		return nil, err
	}
	bud := &pageBudget{left: budget}
	var p *Page
	if len(qs) == 1 {
		p, err = e.listOne(ctx, qs[0], st, cursor, limit, bud)
	} else {
		p, err = e.listPartitions(ctx, qs, st, cursor, limit, bud)
	}
	if err != nil && !errors.Is(err, e.cfg.Errs.Invalid) {
		err = fmt.Errorf("list %s jobs of %s: %w", st, queue, err)
	}
	return p, err
}

// cursorShape reports whether cursor can be one of a status listing's. For a plain queue that
// is "<unix ms>:<job id>" or a stream entry id, or for scheduled and queued a wait list's
// cursor (waitCursor). For a partitioned one it is "<partition>/" and one of those, or
// nothing. listOne and listPartitions check the form the queue needs.
func cursorShape(st status.Status, cursor string) bool {
	if num, rest, ok := strings.Cut(cursor, "/"); ok {
		if n, err := strconv.Atoi(num); err != nil || n < 0 || strconv.Itoa(n) != num {
			return false
		}
		cursor = rest
	}
	if cursor == "" {
		return true
	}
	if tag, ok := waitTags[st]; ok && strings.HasPrefix(cursor, tag) {
		_, _, ok := cutWaitCursor(tag, cursor)
		return ok
	}
	switch st {
	case status.Waiting, status.Scheduled, status.Failed, status.Completed, status.Canceled:
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

// listOne is List of one queue or partition. Scheduled lists the scheduled set, then the jobs
// waiting for a concurrency slot; queued the streams' undelivered entries, then the jobs
// waiting in fair groups' lists: every job the status's gauge counts (ReadStats).
func (e *Engine) listOne(ctx context.Context, q keys.Queue, st status.Status, cursor string, limit int, bud *pageBudget) (*Page, error) {
	if tag, ok := waitTags[st]; ok && strings.HasPrefix(cursor, tag) {
		return e.listWaitLists(ctx, q, st, cursor, limit, bud)
	}
	var p *Page
	var err error
	switch st {
	case status.Waiting, status.Scheduled, status.Failed, status.Completed, status.Canceled:
		p, err = e.listSet(ctx, q, st, cursor, limit, bud)
	case status.Queued:
		p, err = e.listLevels(ctx, q, cursor, limit, bud, bud.chunked(e.listQueued))
	default:
		p, err = e.listLevels(ctx, q, cursor, limit, bud, bud.chunked(e.listInProgress))
	}
	if err != nil || p.Next != "" {
		return p, err
	}
	tag, ok := waitTags[st]
	if !ok {
		return p, nil
	}
	// The first part is over: the wait lists follow, in this page while it has room.
	if len(p.Rows) >= limit || bud.spent() {
		set, _ := waitKeys(q, st)
		more, err := e.store.HasWaitLists(ctx, set)
		if more {
			p.Next = tag + ":0"
		}
		return p, err
	}
	w, err := e.listWaitLists(ctx, q, st, tag+":0", limit-len(p.Rows), bud)
	if err != nil {
		return nil, err
	}
	p.Rows, p.Next = append(p.Rows, w.Rows...), w.Next
	return p, nil
}

// waitTags starts the cursors of the wait lists a listing goes on with after its first part:
// the limits' for scheduled, the fair groups' for queued.
var waitTags = map[status.Status]string{status.Scheduled: "lw:", status.Queued: "gw:"}

// waitKeys is the set that names st's wait lists in q, and the prefix of a list's key.
func waitKeys(q keys.Queue, st status.Status) (set, prefix string) {
	if st == status.Scheduled {
		return q.LimitWaiters(), q.LimitWaiting("")
	}
	return q.GroupsWaiting(), q.GroupWaiting("")
}

// waitCursor is the cursor of a wait-list listing: tag, the list's name (its member in the
// set: a scope instance or a group, base64url, which has no ':' nor '/'), ':' and the position
// in the list to go on from. tag + ":0" starts at the first list.
func waitCursor(tag, list string, pos int) string {
	return tag + base64.RawURLEncoding.EncodeToString([]byte(list)) + ":" + strconv.Itoa(pos)
}

// cutWaitCursor reads a waitCursor.
func cutWaitCursor(tag, cursor string) (list string, pos int, ok bool) {
	enc, num, found := strings.Cut(strings.TrimPrefix(cursor, tag), ":")
	b, err := base64.RawURLEncoding.DecodeString(enc)
	pos, err2 := strconv.Atoi(num)
	if !found || !strings.HasPrefix(cursor, tag) || err != nil || err2 != nil || pos < 0 || strconv.Itoa(pos) != num {
		return "", 0, false
	}
	return string(b), pos, true
}

// listWaitLists pages through st's wait lists of q (waitKeys) from cursor (waitCursor): the
// jobs waiting for a concurrency slot (scheduled, out of the scheduled set) or for a place
// in their fair group's window (queued, with no stream entry). A job listed is one that is
// still where its list says when its record is read.
func (e *Engine) listWaitLists(ctx context.Context, q keys.Queue, st status.Status, cursor string, limit int, bud *pageBudget) (*Page, error) {
	tag := waitTags[st]
	from, pos, ok := cutWaitCursor(tag, cursor)
	if !ok {
		return nil, e.invalid("cursor %q is not one of a %s listing", cursor, st)
	}
	set, prefix := waitKeys(q, st)
	items, err := e.store.WaitListPage(ctx, set, prefix, from, pos, limit)
	if err != nil {
		return nil, err
	}
	more := len(items) >= limit
	ids := make([]string, len(items))
	for k, it := range items {
		ids[k] = it.ID
	}
	n, err := e.fit(ctx, q, ids, bud)
	if err != nil {
		return nil, err
	}
	if n < len(ids) {
		items, ids, more = items[:n], ids[:n], true
	}
	p := &Page{}
	if more && len(items) > 0 {
		last := items[len(items)-1]
		p.Next = waitCursor(tag, last.List, last.Pos+1)
	}
	recs, err := e.store.Records(ctx, q, ids)
	if err != nil {
		return nil, err
	}
	for k, it := range items {
		r := recs[k]
		if r == nil || status.Status(r.Status) != st {
			continue // moved on since the list was read
		}
		if st == status.Queued && (r.Entry != "" || r.Group != it.List) {
			continue // into the stream since: listed there, or not at all
		}
		p.Rows = append(p.Rows, Row{Queue: q.Name(), Part: q, ID: it.ID, Rec: *r})
	}
	return p, nil
}

// listFunc lists a page of one stream (a level of a queue or partition) from cursor.
type listFunc func(ctx context.Context, q keys.Queue, cursor string, limit int) (*Page, error)

// streamChunk is the first read of a stream listing under a byte budget. Entries carry their
// payloads, so a stream is read a chunk at a time and the page cut at the budget.
const streamChunk = 16

// chunked is list read a chunk at a time, the page cut at the budget. Its Next is then the
// entry of the last job it holds (a stream cursor is the last entry seen). The first chunk is
// streamChunk entries. Each next one is as many as the rest of the budget fits at the mean
// size seen. So small jobs take one or two reads, and big ones never many more than fit.
func (b *pageBudget) chunked(list listFunc) listFunc {
	return func(ctx context.Context, q keys.Queue, cursor string, limit int) (*Page, error) {
		out := &Page{}
		var seen, bytes int64
		n := min(limit, streamChunk)
		for {
			p, err := list(ctx, q, cursor, n)
			if err != nil {
				return nil, err
			}
			for _, r := range p.Rows {
				if len(out.Rows) > 0 && b.spent() {
					out.Next = out.Rows[len(out.Rows)-1].entry()
					return out, nil
				}
				out.Rows = append(out.Rows, r)
				b.take(r.size())
				seen, bytes = seen+1, bytes+r.size()
			}
			if p.Next == "" || b.spent() || len(out.Rows) >= limit {
				out.Next = p.Next
				return out, nil
			}
			cursor = p.Next
			rest := limit - len(out.Rows)
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
func (e *Engine) listLevels(ctx context.Context, q keys.Queue, cursor string, limit int, bud *pageBudget, list listFunc) (*Page, error) {
	level, inner, ok := cutLevelCursor(cursor)
	if !ok {
		return nil, e.invalid("cursor %q is not one of a stream listing", cursor)
	}
	found, err := jobstate.QueueLevels(ctx, e.store.Client(), []keys.Queue{q})
	if err != nil {
		return nil, err
	}
	levels := append([]int{keys.MinPriority}, found[0]...)
	out := &Page{}
	for _, l := range levels {
		if l < level {
			continue
		}
		if l > level {
			inner = ""
		}
		if len(out.Rows) >= limit || bud.spent() {
			out.Next = levelCursor(l, "")
			return out, nil
		}
		p, err := list(ctx, q.AtLevel(l), inner, limit-len(out.Rows))
		if err != nil {
			return nil, err
		}
		out.Rows = append(out.Rows, p.Rows...)
		if p.Next != "" {
			out.Next = levelCursor(l, p.Next)
			return out, nil
		}
	}
	return out, nil
}

// levelCursor is the cursor of listLevels at level (see there).
func levelCursor(level int, inner string) string {
	if level <= keys.MinPriority {
		return inner
	}
	return "p" + strconv.Itoa(level) + ":" + inner
}

// cutLevelCursor reads a cursor of listLevels: the level and the level's own cursor.
func cutLevelCursor(cursor string) (level int, inner string, ok bool) {
	rest, found := strings.CutPrefix(cursor, "p")
	if !found {
		return keys.MinPriority, cursor, true
	}
	num, inner, ok := strings.Cut(rest, ":")
	level, err := strconv.Atoi(num)
	if !ok || err != nil || level <= keys.MinPriority || level > keys.MaxPriority || strconv.Itoa(level) != num {
		return 0, "", false
	}
	return level, inner, true
}

// listPartitions is List of a partitioned queue: it fills the page from partition after
// partition, starting where the cursor "<partition>/<cursor>" says.
func (e *Engine) listPartitions(ctx context.Context, qs []keys.Queue, st status.Status, cursor string, limit int, bud *pageBudget) (*Page, error) {
	n, inner := 0, ""
	if cursor != "" {
		num, rest, ok := strings.Cut(cursor, "/")
		var err error
		n, err = strconv.Atoi(num)
		if !ok || err != nil || n < 0 || n >= len(qs) || strconv.Itoa(n) != num {
			return nil, e.invalid("cursor %q is not one of a partitioned %s listing (<partition 0..%d>/<cursor>)", cursor, st, len(qs)-1)
		}
		inner = rest
	}
	out := &Page{}
	for ; n < len(qs); n, inner = n+1, "" {
		if len(out.Rows) >= limit || bud.spent() {
			out.Next = strconv.Itoa(n) + "/"
			return out, nil
		}
		p, err := e.listOne(ctx, qs[n], st, inner, limit-len(out.Rows), bud)
		if err != nil {
			return nil, err
		}
		out.Rows = append(out.Rows, p.Rows...)
		if p.Next != "" {
			out.Next = strconv.Itoa(n) + "/" + p.Next
			return out, nil
		}
	}
	return out, nil
}

// listSet pages through a sorted set of job ids: waiting (the index of waiting workflow tasks,
// earliest published first), scheduled (earliest due first), dead (latest death first), or
// the index of completed or canceled jobs (latest first). An indexed id whose
// record expired is skipped; the index's trim (finish.lua, cancel.lua) removes it in time.
func (e *Engine) listSet(ctx context.Context, q keys.Queue, st status.Status, cursor string, limit int, bud *pageBudget) (*Page, error) {
	var after *jobstate.SetItem
	if cursor != "" {
		s, id, _ := strings.Cut(cursor, ":")
		score, err := strconv.ParseInt(s, 10, 64)
		if err != nil || !keys.ValidID(id) {
			return nil, e.invalid("cursor %q is not one of a %s listing (<unix ms>:<job id>)", cursor, st)
		}
		after = &jobstate.SetItem{Score: score, Member: id}
	}
	// One more than the page, to know whether another page follows.
	var items []jobstate.SetItem
	var err error
	switch st {
	case status.Waiting:
		items, err = e.store.SetPage(ctx, q.WorkflowWaiting(), false, after, limit+1)
	case status.Scheduled:
		items, err = e.store.ScheduledPage(ctx, q, after, limit+1)
	case status.Completed:
		items, err = e.store.CompletedPage(ctx, q, after, limit+1)
	case status.Canceled:
		items, err = e.store.CanceledPage(ctx, q, after, limit+1)
	default:
		items, err = e.store.DeadPage(ctx, q, false, after, limit+1)
	}
	if err != nil {
		return nil, err
	}
	p := &Page{}
	more := len(items) > limit
	items = items[:min(limit, len(items))]
	ids := make([]string, len(items))
	for k, it := range items {
		ids[k] = it.Member
	}
	n, err := e.fit(ctx, q, ids, bud)
	if err != nil {
		return nil, err
	}
	if n < len(ids) {
		items, ids, more = items[:n], ids[:n], true
	}
	if more && len(items) > 0 {
		last := items[len(items)-1]
		p.Next = strconv.FormatInt(last.Score, 10) + ":" + last.Member
	}
	recs, err := e.store.Records(ctx, q, ids)
	if err != nil {
		return nil, err
	}
	for k, it := range items {
		if recs[k] == nil {
			continue // gone since the set was read (purged, or finished and expired)
		}
		if status.Status(recs[k].Status) != st {
			continue // moved on since the set was read
		}
		p.Rows = append(p.Rows, Row{Queue: q.Name(), Part: q, ID: it.Member, Rec: *recs[k]})
	}
	return p, nil
}

// listQueued pages through the stream entries after the group's last-delivered id.
// XREADGROUP ">" hands entries out in stream order, so every entry after that id is one no
// worker was handed yet. The pending entries in the page's range are left out as well, for
// the rare group whose read position moved back (XGROUP SETID, a failover to older data).
func (e *Engine) listQueued(ctx context.Context, q keys.Queue, cursor string, limit int) (*Page, error) {
	start, err := e.streamStart(status.Queued, cursor)
	if err != nil {
		return nil, err
	}
	entries, group, err := e.store.StreamPage(ctx, q, start, limit+1)
	if err != nil {
		return nil, err
	}
	if group != nil {
		if last, ok := parseEntryID(group.LastDelivered); ok && last != (entryID{}) {
			if from, _ := parseEntryID(start); start == "-" || !last.less(from) {
				// The cursor is at or before the delivered entries: skip them.
				start = last.next().String()
				if entries, err = e.store.StreamRange(ctx, q, start, limit+1); err != nil {
					return nil, err
				}
			}
		}
	}
	p := &Page{}
	if len(entries) > limit {
		entries = entries[:limit]
		p.Next = entries[len(entries)-1].ID
	}
	if len(entries) == 0 {
		return p, nil
	}
	recs, held, err := e.store.EntryRecords(ctx, q, entries, group != nil)
	if err != nil {
		return nil, err
	}
	for k, en := range entries {
		if en.Job == "" || held[en.ID] {
			continue // an unreadable entry (a worker will dead-letter it), or one handed out
		}
		// Only the entry that carries the job now, while the job is queued (not yet started).
		r := recs[k]
		if r == nil || r.Entry != en.ID || status.Status(r.Status) != status.Queued {
			continue
		}
		r.Payload = []byte(en.Payload)
		if en.Metadata != "" {
			r.Metadata = en.Metadata
		}
		p.Rows = append(p.Rows, Row{Queue: q.Name(), Part: q, ID: en.Job, Rec: *r})
	}
	return p, nil
}

// listInProgress pages through the group's pending entries list and reads the jobs that the
// entries carry in one script.
func (e *Engine) listInProgress(ctx context.Context, q keys.Queue, cursor string, limit int) (*Page, error) {
	start, err := e.streamStart(status.InProgress, cursor)
	if err != nil {
		return nil, err
	}
	// No stream or no group yet reads as none: nothing was ever handed out.
	pend, err := e.store.PendingPage(ctx, q, start, limit+1)
	if err != nil {
		return nil, err
	}
	p := &Page{}
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
	rows, err := e.store.EntryJobs(ctx, q, entries)
	if err != nil {
		return nil, err
	}
	for k, row := range rows {
		if row.ID == "" {
			continue // the entry carries no live job: recovery or the worker will clear it
		}
		p.Rows = append(p.Rows, Row{Queue: q.Name(), Part: q, ID: row.ID, Rec: jobstate.DecodeRecord(row.Flat),
			Held: &pend[k], Attempt: row.Attempt})
	}
	return p, nil
}

// streamStart is the XRANGE start of a stream listing from cursor: the entry after it, or
// "-" for none.
func (e *Engine) streamStart(st status.Status, cursor string) (string, error) {
	if cursor == "" {
		return "-", nil
	}
	id, ok := parseEntryID(cursor)
	if !ok {
		return "", e.invalid("cursor %q is not one of a %s listing (a stream entry id)", cursor, st)
	}
	return id.next().String(), nil
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

// fit returns how many of the jobs ids, in order, the page's budget takes: at least one, and
// each one after while the budget is not spent, counting their sizes against it. The budget
// so cuts a page before any record is read: the sizes first, then only the records that fit.
func (e *Engine) fit(ctx context.Context, q keys.Queue, ids []string, bud *pageBudget) (int, error) {
	sizes, err := e.store.RecordSizes(ctx, q, ids)
	if err != nil {
		return 0, err
	}
	for k, n := range sizes {
		if k > 0 && bud.spent() {
			return k, nil
		}
		bud.take(n)
	}
	return len(ids), nil
}
