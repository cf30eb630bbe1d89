package pipeline

import (
	"cmp"
	"context"
	"strings"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

// AcrossQueuesSep ends the queue's name in a cursor of ListAllQueues: "<queue>/<the queue's
// List cursor>". keys.ValidateQueue refuses '/' in a queue name, so the first one in a cursor
// always ends the name, whatever the queue's own cursor holds (a partitioned queue's has a '/'
// of its own).
const AcrossQueuesSep = '/'

// acrossQueuesVisits bounds the queues one ListAllQueues page lists. Most are skipped without a
// call by their gauges; the indexes of finished jobs have none, so a page of those would
// otherwise read every queue's index.
const acrossQueuesVisits = 100

// ListAllQueues returns a page of the jobs in status st across every known queue (QueueNames):
// queue after queue, in name order, each queue's jobs in List's order for st. Every job's Queue
// names its queue. Page's Limit and MaxBytes are List's and bound the whole page, which may
// span queues.
//
// The cursor is "<queue>/<that queue's List cursor>" ("emails/" is the start of queue emails;
// see AcrossQueuesSep). A cursor whose queue was deleted meanwhile goes on with the next queue
// by name.
//
// It reads the gauges of every known queue first (Queues: one pipeline per 100 queues) and
// skips the queues whose gauge for st is 0: scheduled, queued, in_progress, waiting and failed
// (dead) cost nothing for the queues without such jobs. The indexes of completed and canceled
// jobs have no gauge, so each queue's is read. A page lists at most 100 queues. Then it ends
// short, even empty, with a Next that starts at the next one. As with List, only an empty Next
// means the end.
//
// JobPage.Leases, for in_progress, is keyed by job id, which is unique only within a queue. So a
// page never holds two jobs of one id: it ends before the queue that would add the second, and
// the next page starts with that queue.
func (i *Inspector) ListAllQueues(ctx context.Context, st status.Status, page Page) (*JobPage, error) {
	switch {
	case page.Limit < 0:
		return nil, invalid("page limit %d is negative", page.Limit)
	case page.MaxBytes < 0:
		return nil, invalid("page byte budget %d is negative", page.MaxBytes)
	}
	st = status.Parse(string(st))
	if !st.Listable() {
		// List's own refusal says why, and names the statuses it lists.
		_, err := i.List(ctx, DefaultQueue, st, Page{})
		return nil, cmp.Or(err, invalid("status %q is not listed", st))
	}
	start, inner, err := cutAcrossCursor(page.Cursor)
	if err != nil {
		return nil, err
	}
	limit := min(cmp.Or(page.Limit, defaultPageLimit), maxPageLimit)
	budget := cmp.Or(page.MaxBytes, defaultPageBytes)
	all, err := i.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := &JobPage{}
	var spent int64
	visits := 0
	for _, s := range all {
		switch {
		case s.Queue < start:
			continue
		case s.Queue > start:
			inner = ""
		}
		if n, gauged := gaugeOf(st, s); gauged && n == 0 {
			continue
		}
		if len(out.Jobs) >= limit || spent >= budget || visits >= acrossQueuesVisits {
			out.Next = acrossCursor(s.Queue, "")
			return out, nil
		}
		visits++
		p, err := i.List(ctx, s.Queue, st, Page{Cursor: inner, Limit: limit - len(out.Jobs), MaxBytes: budget - spent})
		if err != nil {
			return nil, err
		}
		if len(out.Jobs) > 0 && sharesID(out, p) {
			out.Next = acrossCursor(s.Queue, "")
			return out, nil
		}
		for _, j := range p.Jobs {
			spent += int64(len(j.Payload) + len(j.Result))
		}
		out.Jobs = append(out.Jobs, p.Jobs...)
		for id, l := range p.Leases {
			if out.Leases == nil {
				out.Leases = make(map[string]Lease, len(p.Leases))
			}
			out.Leases[id] = l
		}
		if p.Next != "" {
			out.Next = acrossCursor(s.Queue, p.Next)
			return out, nil
		}
	}
	return out, nil
}

// acrossCursor is a cursor of ListAllQueues: in queue, at the queue's own cursor inner.
func acrossCursor(queue, inner string) string { return queue + string(AcrossQueuesSep) + inner }

// cutAcrossCursor reads a cursor of ListAllQueues: the queue it is in and that queue's own
// cursor, which List checks. An empty cursor starts before every queue ("" sorts first).
func cutAcrossCursor(cursor string) (queue, inner string, err error) {
	if cursor == "" {
		return "", "", nil
	}
	queue, inner, ok := strings.Cut(cursor, string(AcrossQueuesSep))
	if !ok || keys.ValidateQueue(queue) != nil {
		return "", "", invalid("cursor %q is not one of a listing across queues (<queue>%c<the queue's cursor>)", cursor, AcrossQueuesSep)
	}
	return queue, inner, nil
}

// gaugeOf returns the gauge of s that counts the jobs in st, and whether one does.
func gaugeOf(st status.Status, s *QueueStats) (n int64, gauged bool) {
	switch st {
	case status.Scheduled:
		return s.Scheduled, true
	case status.Queued:
		return s.Queued, true
	case status.InProgress:
		return s.InProgress, true
	case status.Waiting:
		return s.Waiting, true
	case status.Failed:
		return s.Dead, true
	}
	return 0, false
}

// sharesID reports whether page p has a job whose id a job of out has (in another queue).
func sharesID(out, p *JobPage) bool {
	if len(p.Leases) == 0 {
		return false // only in_progress pages key anything by id
	}
	seen := make(map[string]bool, len(out.Jobs))
	for _, j := range out.Jobs {
		seen[j.ID] = true
	}
	for _, j := range p.Jobs {
		if seen[j.ID] {
			return true
		}
	}
	return false
}
