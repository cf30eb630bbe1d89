package stream

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/rediserr"
)

//go:embed renew.lua
var renewSrc string
var renewScript = redis.NewScript(renewSrc)

// renew re-claims the topic's held entries; see Subscriber.maintain.
func (t *topic) renew() {
	t.renewing.Lock()
	defer t.renewing.Unlock()
	t.st.mu.Lock()
	ids := make([]string, 0, len(t.held))
	for id, d := range t.held {
		if !d.lost {
			ids = append(ids, id)
		}
	}
	t.st.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), t.s.cfg.LeaseInterval)
	defer cancel()
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		args := make([]any, 0, 2+len(chunk))
		args = append(args, t.s.cfg.Group, t.s.cfg.Consumer)
		for _, id := range chunk {
			args = append(args, id)
		}
		kept, err := renewScript.Run(ctx, t.s.rdb, []string{t.name}, args...).StringSlice()
		switch {
		case err == nil:
		case groupGone(err):
			// The group or the stream is gone (FLUSHALL, XGROUP DESTROY, DEL): nothing is
			// pending for this consumer any more, every lease in the chunk is lost.
			kept = nil
		default:
			// A Redis outage (or LOADING, OOM...) is not a lost lease: try again at the next
			// interval.
			t.logRedisError("renew leases", err, watermill.LogFields{"count": len(chunk), "retry_in": t.s.cfg.LeaseInterval})
			return
		}
		ok := make(map[string]struct{}, len(kept))
		for _, id := range kept {
			ok[id] = struct{}{}
		}
		t.st.mu.Lock()
		for _, id := range chunk {
			if _, still := ok[id]; still {
				continue
			}
			if d, held := t.held[id]; held && !d.lost {
				d.lost = true
				d.cancel(ErrLeaseLost)
				t.logger.Info("lease lost", watermill.LogFields{"entry": id})
			}
		}
		t.st.mu.Unlock()
	}
}

// groupGone reports whether err says that a stream or its consumer group does not exist, in a
// script's error too (rediserr.NoStream).
func groupGone(err error) bool { return rediserr.IsNoStream(err) }

// Orphans.
//
// XREADGROUP ">" delivers entries to this consumer when the server runs it, whether or not the
// reply arrives. The go-redis client silently resends a command whose reply was lost
// (io.EOF, a reset connection), up to MaxRetries times. A read can also end in an error after the server ran it.
// The entries of a lost reply are pending for this consumer, never handed out, never renewed.
// Without the sweep, they wait for the application's recovery after its visibility timeout. That
// counts as a lost attempt.
//
// So a subscription's reader looks for them every LeaseInterval, and at once after a failed
// read. It lists this consumer's pending entries (XPENDING with the consumer, paged). It adopts
// each one that passes three tests.
//
// First, no subscription of the stream holds it.
//
// Second, it lies in no span. Every read notes the range of ids it returned. They are
// consecutive in the stream: nothing between its first and its last went to anyone else. Every
// adoption notes its entry's id. An entry this process handed out lies in a span: settled
// without acking (DeferAck, ManualSettle), or acked and not yet XACKed. An entry of a lost reply
// lies in none.
//
// Third, it was touched (delivered, claimed or renewed) after the stream was first subscribed
// here, to the millisecond. That is, its idle time is less than the time since. Any other was
// left by an earlier process with the same consumer name. It is left to the application's
// recovery. So a job that crashes its worker cannot loop without its attempt being counted.
//
// Adopting is claiming the entry again (adopt.lua) and handing it out as a read does, with slots
// reserved first. A sweep and a read of the same stream never overlap (see streamState.gate).

//go:embed adopt.lua
var adoptSrc string
var adoptScript = redis.NewScript(adoptSrc)

const (
	sweepPage  = 1000 // entries per XPENDING
	sweepPages = 10   // XPENDINGs per sweep; the next sweep goes on from there
	minSweepAt = 4096 // spans noted before a sweep is asked for, whatever LeaseInterval
	idleSlack  = 2 * time.Millisecond
)

// adoptOrphans runs one orphan sweep for t (see Orphans). It reports false when the
// subscription is stopping.
func (t *topic) adoptOrphans(ctx context.Context, w *waiter) bool {
	t.st.gate.Lock()
	defer t.st.gate.Unlock()
	ids, err := t.orphans(ctx)
	if err != nil {
		t.logRedisError("list pending entries", err, watermill.LogFields{"retry_in": t.s.cfg.LeaseInterval})
		return true // again at the next interval
	}
	for len(ids) > 0 {
		n := t.s.reserve(w, t.stopping, min(len(ids), t.s.cfg.BatchSize))
		if n == 0 {
			return false
		}
		entries, err := t.adopt(ctx, ids[:n])
		t.s.endRead(w, false)
		if err != nil {
			t.s.release(n)
			t.logRedisError("adopt orphaned entries", err, watermill.LogFields{"count": n, "retry_in": t.s.cfg.LeaseInterval})
			return true
		}
		ids = ids[n:]
		held, fresh := t.take(ctx, entries, true)
		t.s.release(n - held)
		if held > 0 {
			t.logger.Info("adopted orphaned entries", watermill.LogFields{"count": held})
		}
		if !t.dispatch(fresh) {
			return false
		}
	}
	return true
}

// orphans lists this consumer's pending entries, up to sweepPages pages from where the last
// sweep stopped. It prunes the stream's spans with what it saw, and returns the orphans' ids.
func (t *topic) orphans(ctx context.Context) ([]string, error) {
	st, cfg := t.st, t.s.cfg
	from := t.sweepFrom
	lo := entryID{}
	if from != "-" {
		lo, _ = parseID(from)
	}
	var listed []entryID // this consumer's pending entries, ascending
	type candidate struct {
		id  entryID
		str string
	}
	var young []candidate
	start, complete := from, false
	for range sweepPages {
		// Measured before the request. So a slow reply or a busy machine can only make an entry
		// look older than it is, leaving it to the application's recovery. An earlier process's
		// entry never looks young. Redis counts idle time in whole milliseconds of its own
		// clock; the slack covers the rounding.
		since := time.Since(st.since) + idleSlack
		page, err := t.s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: t.name, Group: cfg.Group, Start: start, End: "+", Count: sweepPage, Consumer: cfg.Consumer,
		}).Result()
		if groupGone(err) {
			t.sweepFrom = "-"
			return nil, nil // nothing is pending; the reader makes the group again
		}
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			id, ok := parseID(p.ID)
			if !ok {
				continue
			}
			listed = append(listed, id)
			if p.Idle < since {
				young = append(young, candidate{id, p.ID})
			}
		}
		if len(page) < sweepPage || len(listed) == 0 {
			complete = true
			break
		}
		start = listed[len(listed)-1].next().String()
	}
	hi := entryID{math.MaxUint64, math.MaxUint64}
	if complete {
		t.sweepFrom = "-"
	} else {
		t.sweepFrom = start
		hi = listed[len(listed)-1]
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	st.pruneLocked(lo, hi, listed)
	var ids []string
	for _, c := range young {
		if st.heldLocked(c.str) == nil && !st.spannedLocked(c.id) {
			ids = append(ids, c.str)
		}
	}
	return ids, nil
}

// adopt claims ids for this consumer again with adopt.lua and returns the entries claimed.
func (t *topic) adopt(ctx context.Context, ids []string) ([]redis.XMessage, error) {
	args := make([]any, 0, 2+len(ids))
	args = append(args, t.s.cfg.Group, t.s.cfg.Consumer)
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := adoptScript.Run(ctx, t.s.rdb, []string{t.name}, args...).Result()
	if groupGone(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseEntries(v)
}

// parseEntries reads a script's reply in XCLAIM's form.
func parseEntries(v any) ([]redis.XMessage, error) {
	rows, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("stream: entries reply is %T", v)
	}
	out := make([]redis.XMessage, 0, len(rows))
	for _, r := range rows {
		e, _ := r.([]any)
		if len(e) != 2 {
			return nil, fmt.Errorf("stream: entry reply is %v", r)
		}
		id, _ := e[0].(string)
		fields, _ := e[1].([]any)
		values := make(map[string]any, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			values[k] = fields[i+1]
		}
		out = append(out, redis.XMessage{ID: id, Values: values})
	}
	return out, nil
}

// streamState is what a Subscriber knows of one stream, shared by its subscriptions of it. A
// stream may have two for a while: one closing and its successor running. Or two live ones, when
// an application subscribes twice. Its mutex also guards those subscriptions' held sets. So
// looking an entry up in all of them and holding it in one is a single step.
type streamState struct {
	// gate keeps sweeps apart from reads and from each other. A read holds it shared from before
	// it is sent until its entries are held. A sweep holds it exclusively from its listing until
	// it has handed out what it adopted.
	//
	// Otherwise a sibling subscription's read could deliver an entry that a sweep then lists as
	// an orphan and adopts. The one that took it second could find the first copy settled
	// already, and hand it out again. Or a span could be noted between a listing and its
	// pruning, and dropped unseen. A subscription reads and sweeps on one goroutine: alone on
	// its stream, it never waits here. (A closing subscription reads no more.)
	gate sync.RWMutex

	mu      sync.Mutex
	topics  []*topic  // subscriptions of the stream, live or closing
	since   time.Time // when the first of them subscribed
	spans   []span    // ids handed to this consumer (see Orphans)
	sweepAt int       // ask for a sweep when this many spans are noted
}

// A span is a range of entry ids handed to this consumer by one read, or one adopted entry.
type span struct{ first, last entryID }

func newStreamState() *streamState {
	return &streamState{since: time.Now(), sweepAt: minSweepAt}
}

// heldLocked returns the delivery of id if a subscription of the stream holds it.
func (st *streamState) heldLocked(id string) *delivery {
	for _, t := range st.topics {
		if d := t.held[id]; d != nil {
			return d
		}
	}
	return nil
}

// noteLocked notes that the entries from first to last were handed to t. They are all of one
// read (ascending, consecutive in the stream), or one adopted entry. Many spans may pile up
// since the last sweep, with a long LeaseInterval on a busy stream. Then it asks t's reader for
// a sweep, which prunes them.
func (st *streamState) noteLocked(first, last string, t *topic) {
	f, ok1 := parseID(first)
	l, ok2 := parseID(last)
	if !ok1 || !ok2 {
		return
	}
	st.spans = append(st.spans, span{f, l})
	if len(st.spans) >= st.sweepAt {
		st.sweepAt = 2 * len(st.spans)
		select {
		case t.sweep <- struct{}{}:
		default:
		}
	}
}

// pruneLocked sorts the spans by first id and merges overlapping ones. (Ids are read again after
// the group's position moved back.) Then it drops each span that a sweep's listing shows to be
// done with. Such a span is inside the range the listing covered, [lo, hi], and holds none of
// the ids it listed (this consumer's pending entries, ascending).
//
// Nothing in such a span is pending for this consumer any more. Nothing in it can be so again,
// but by a new read or adoption, which notes a span of its own. (No span is noted between the
// listing and the pruning: see gate.)
func (st *streamState) pruneLocked(lo, hi entryID, listed []entryID) {
	slices.SortFunc(st.spans, func(a, b span) int { return a.first.cmp(b.first) })
	merged := st.spans[:0]
	for _, sp := range st.spans {
		if n := len(merged); n > 0 && sp.first.cmp(merged[n-1].last) <= 0 {
			if sp.last.cmp(merged[n-1].last) > 0 {
				merged[n-1].last = sp.last
			}
			continue
		}
		merged = append(merged, sp)
	}
	kept := merged[:0]
	for _, sp := range merged {
		if sp.first.cmp(lo) >= 0 && sp.last.cmp(hi) <= 0 {
			i, _ := slices.BinarySearchFunc(listed, sp.first, entryID.cmp)
			if i == len(listed) || listed[i].cmp(sp.last) > 0 {
				continue // none of its entries is pending here
			}
		}
		kept = append(kept, sp)
	}
	st.spans = kept
	st.sweepAt = max(minSweepAt, 2*len(kept))
}

// spannedLocked reports whether id lies in a span. The spans must be sorted and disjoint, as
// pruneLocked leaves them; the gate keeps them so until the sweep is over.
func (st *streamState) spannedLocked(id entryID) bool {
	i, found := slices.BinarySearchFunc(st.spans, id, func(sp span, id entryID) int { return sp.first.cmp(id) })
	return found || i > 0 && id.cmp(st.spans[i-1].last) <= 0
}

// entryID is a parsed stream entry id, "<ms>-<seq>".
type entryID struct{ ms, seq uint64 }

func parseID(s string) (entryID, bool) {
	i := strings.IndexByte(s, '-')
	if i < 0 {
		return entryID{}, false
	}
	ms, err1 := strconv.ParseUint(s[:i], 10, 64)
	seq, err2 := strconv.ParseUint(s[i+1:], 10, 64)
	return entryID{ms, seq}, err1 == nil && err2 == nil
}

func (a entryID) cmp(b entryID) int {
	return cmp.Or(cmp.Compare(a.ms, b.ms), cmp.Compare(a.seq, b.seq))
}

// next returns the smallest id after a.
func (a entryID) next() entryID {
	if a.seq == math.MaxUint64 {
		return entryID{a.ms + 1, 0}
	}
	return entryID{a.ms, a.seq + 1}
}

func (a entryID) String() string {
	return strconv.FormatUint(a.ms, 10) + "-" + strconv.FormatUint(a.seq, 10)
}

// EntryTime returns the time encoded in a stream entry id ("<ms>-<seq>"), or the zero time.
func EntryTime(id string) time.Time {
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			ms, err := strconv.ParseInt(id[:i], 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.UnixMilli(ms)
		}
	}
	return time.Time{}
}
