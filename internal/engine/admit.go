package engine

import (
	"context"
	"maps"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/stream"
)

// admitRead admits the jobs of msgs, a batch the subscriber read from topic, when their queue
// has limits. It reports which messages are not to run (deferred by a limit, or moved on).
// Those granted carry their grant. What it could not get an answer for is left unmarked, and
// the middleware asks again for each (admit).
func (l *Loop) admitRead(ctx context.Context, topic string, msgs []*message.Message) []bool {
	q, ok := l.queue(topic)
	b := l.Leases.Load()
	if !ok || b == nil || !l.limitedQueue(q) {
		return nil
	}
	ql := b.Queue(q)
	if ql == nil {
		return nil
	}
	jobs := make([]jobstate.AdmitItem, 0, len(msgs))
	idx := make([]int, 0, len(msgs)) // the index in msgs of each job
	for k, msg := range msgs {
		if msg.Metadata[stream.PoisonKey] != "" || msg.Metadata[MetaForeign] != "" {
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
		case AdmitGranted:
			msg.SetContext(WithGrant(msg.Context(), grants[i]))
		case AdmitDeferred:
			l.Log.Debug().Str("queue", q.Name()).Str("job_id", msg.UUID).Msg("job deferred by a limit")
			skip[idx[i]] = true
		case AdmitRefused:
			skip[idx[i]] = true
		}
	}
	return skip
}

// admitItem is what admit.lua needs of msg's job.
func admitItem(msg *message.Message, fence bool) jobstate.AdmitItem {
	attempt, _, _, typ, _ := keys.ParseEntryJob(msg.Metadata[MetaJob])
	return jobstate.AdmitItem{ID: msg.UUID, Entry: msg.Metadata[stream.EntryIDKey], Type: typ,
		Attempt: attempt, LimitKey: msg.Metadata[MetaLimitKey], Fence: fence}
}

// admit holds msg's job to its queue's limits, when the queue has any and admitRead did not
// admit it already. It reports whether the job is to run; when it is, msg's context carries
// its grant. A job that is not to run was deferred (its entry is gone, it waits for its limit)
// or moved on. Or the message's context ended (shutdown, lost lease) before an answer. Then
// the subscriber puts the entry back. A job asked about here is fenced (it may be one whose
// answer was lost, and deferred since). An admission that fails (Redis) is asked again after
// a pause: the job may not run unadmitted.
func (l *Loop) admit(msg *message.Message) bool {
	if msg.Metadata[stream.PoisonKey] != "" || GrantOf(msg.Context()) != nil {
		return true
	}
	b := l.Leases.Load()
	q, ok := l.queue(msg.Metadata[stream.StreamKey])
	if b == nil || !ok || !l.limitedQueue(q) {
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
		case AdmitGranted:
			msg.SetContext(WithGrant(ctx, grants[0]))
			return true
		case AdmitDeferred:
			l.Log.Debug().Str("queue", q.Name()).Str("job_id", msg.UUID).Msg("job deferred by a limit")
			return false
		case AdmitRefused:
			return false
		}
		l.Log.Warn().Str("queue", q.Name()).Str("job_id", msg.UUID).Dur("retry_in", pause).
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
func (l *Loop) limitedQueue(q *keys.Queue) bool {
	m := l.limited.Load()
	if m == nil || len(*m) == 0 {
		return false // no queue has limits: spare building the key (a string per job)
	}
	if q.Level() == keys.MinPriority {
		return (*m)[q.Stream()]
	}
	return (*m)[q.LevelStream(keys.MinPriority)]
}

// readLimits reads the limits of each partition the worker reads. On an error the last answer
// stays; a limit that does not decode is logged and left out (the scripts ignore it too).
func (l *Loop) readLimits(ctx context.Context, book *LeaseBook, names []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	parts := make([]keys.Queue, len(names))
	for k, n := range names {
		parts[k] = keys.New(l.Prefix, n)
	}
	fields, bad, err := jobstate.ReadLimitFields(ctx, l.Rdb, parts)
	if err != nil {
		return
	}
	m := make(map[string]bool, len(parts))
	for k, q := range parts {
		limits := fields[k]
		for _, err := range bad[k] {
			l.Log.Debug().Err(err).Str("queue", q.Name()).Msg("a limit of the queue cannot be read; it is not applied")
		}
		if len(limits) > 0 {
			m[q.Stream()] = true
		}
		book.SetLimits(q, limits)
	}
	if old := l.limited.Load(); old != nil && maps.Equal(*old, m) {
		return
	}
	l.limited.Store(&m)
}
