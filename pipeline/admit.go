package pipeline

import (
	"context"
	"maps"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/stream"
)

// newLeaseBook is the lease book of a session of w (engine.LeaseBook: admission's leases).
func newLeaseBook(w *Worker) *engine.LeaseBook {
	return engine.NewLeaseBook(w.store, w.log, w.cfg.Name, w.cfg.VisibilityTimeout, w.cfg.Concurrency, w.cfg.ReadBatch)
}

// admitRead admits the jobs of msgs, a batch the subscriber read from topic, when their queue
// has limits. It reports which messages are not to run (deferred by a limit, or moved on).
// Those granted carry their grant. What it could not get an answer for is left unmarked, and
// the middleware asks again for each (admit).
func (w *Worker) admitRead(ctx context.Context, topic string, msgs []*message.Message) []bool {
	q, ok := w.queue(topic)
	b := w.leases.Load()
	if !ok || b == nil || !w.limitedQueue(q) {
		return nil
	}
	ql := b.Queue(q)
	if ql == nil {
		return nil
	}
	jobs := make([]jobstate.AdmitItem, 0, len(msgs))
	idx := make([]int, 0, len(msgs)) // the index in msgs of each job
	for k, msg := range msgs {
		if msg.Metadata[stream.PoisonKey] != "" || msg.Metadata[metaForeign] != "" {
			continue // dead-lettered or adopted first, in the middleware
		}
		jobs = append(jobs, admitItem(msg, false))
		idx = append(idx, k)
	}
	if len(jobs) == 0 {
		return nil
	}
	outs, grants := b.Admit(ctx, ql, q, jobs)
	skip := make([]bool, len(msgs))
	for i, o := range outs {
		msg := msgs[idx[i]]
		switch o {
		case engine.AdmitGranted:
			msg.SetContext(engine.WithGrant(msg.Context(), grants[i]))
		case engine.AdmitDeferred:
			w.log.Debug().Str("queue", q.Name()).Str("job_id", msg.UUID).Msg("job deferred by a limit")
			skip[idx[i]] = true
		case engine.AdmitRefused:
			skip[idx[i]] = true
		}
	}
	return skip
}

// admitItem is what admit.lua needs of msg's job.
func admitItem(msg *message.Message, fence bool) jobstate.AdmitItem {
	attempt, _, _, typ, _ := keys.ParseEntryJob(msg.Metadata[metaJob])
	return jobstate.AdmitItem{ID: msg.UUID, Entry: msg.Metadata[stream.EntryIDKey], Type: typ,
		Attempt: attempt, LimitKey: msg.Metadata[metaLimitKey], Fence: fence}
}

// admit holds msg's job to its queue's limits, when the queue has any and admitRead did not
// admit it already. It reports whether the job is to run; when it is, msg's context carries
// its grant. A job that is not to run was deferred (its entry is gone, it waits for its limit)
// or moved on. Or the message's context ended (shutdown, lost lease) before an answer. Then
// the subscriber puts the entry back. A job asked about here is fenced (it may be one whose
// answer was lost, and deferred since). An admission that fails (Redis) is asked again after
// a pause: the job may not run unadmitted.
func (w *Worker) admit(msg *message.Message) bool {
	if msg.Metadata[stream.PoisonKey] != "" || engine.GrantOf(msg.Context()) != nil {
		return true
	}
	b := w.leases.Load()
	q, ok := w.queue(msg.Metadata[stream.StreamKey])
	if b == nil || !ok || !w.limitedQueue(q) {
		return true
	}
	ctx := msg.Context()
	pause := 50 * time.Millisecond
	for {
		ql := b.Queue(q)
		if ql == nil {
			return true // its limits were deleted meanwhile
		}
		outs, grants := b.Admit(ctx, ql, q, []jobstate.AdmitItem{admitItem(msg, true)})
		switch outs[0] {
		case engine.AdmitGranted:
			msg.SetContext(engine.WithGrant(ctx, grants[0]))
			return true
		case engine.AdmitDeferred:
			w.log.Debug().Str("queue", q.Name()).Str("job_id", msg.UUID).Msg("job deferred by a limit")
			return false
		case engine.AdmitRefused:
			return false
		}
		w.log.Warn().Str("queue", q.Name()).Str("job_id", msg.UUID).Dur("retry_in", pause).
			Msg("could not admit the job under its queue's limits; asking again")
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return false
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// limitedQueue reports whether q had limits at the last read (the settings watcher). The q
// may be a view of one of its priority levels (keys.Queue.AtLevel). The limits are the
// queue's, found by its level-1 stream, so a job of any level is held to them.
func (w *Worker) limitedQueue(q *keys.Queue) bool {
	m := w.limited.Load()
	return m != nil && (*m)[q.LevelStream(keys.MinPriority)]
}

// readLimits reads the limits of each partition the worker reads. On an error the last answer
// stays; a limit that does not decode is logged and left out (the scripts ignore it too).
func (w *Worker) readLimits(ctx context.Context, book *engine.LeaseBook, names []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	parts := make([]keys.Queue, len(names))
	for k, n := range names {
		parts[k] = keys.New(w.cfg.Prefix, n)
	}
	fields, bad, err := jobstate.ReadLimitFields(ctx, w.rdb, parts)
	if err != nil {
		return
	}
	m := make(map[string]bool, len(parts))
	for k, q := range parts {
		limits := fields[k]
		for _, err := range bad[k] {
			w.log.Debug().Err(err).Str("queue", q.Name()).Msg("a limit of the queue cannot be read; it is not applied")
		}
		if len(limits) > 0 {
			m[q.Stream()] = true
		}
		book.SetLimits(q, limits)
	}
	if old := w.limited.Load(); old != nil && maps.Equal(*old, m) {
		return
	}
	w.limited.Store(&m)
}
