package pipeline

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/stream"
)

// LimitsRefresh is how often a worker reads which of its queues have limits (Inspector.SetLimit):
// a limit set on a queue without one applies within this time, and a queue whose last limit
// was deleted stops paying for admission within it. Changes to a queue that has limits apply
// at once: admission reads the limits in the same script that applies them.
const LimitsRefresh = time.Second

// admitBatch bounds the jobs of one admit.lua call: Redis serves no other client while a
// script runs.
const admitBatch = 100

// Admission holds every job of a queue with limits to them before its handler runs
// (admit.lua): granted, it runs; deferred, its entry is gone and it is scheduled again, so the
// worker settles the message without running it (no attempt, no outcome).
//
// A batch the subscriber read is admitted whole, before any of it is handed out
// (admitRead, the subscriber's Config.Prepare): one round trip for the batch, its chunks
// pipelined, so the batch reaches the handlers together and the reads, outcomes and their
// batches keep the shape they have without limits. Admitting message by message in the
// middleware instead (each message's goroutine asking and waiting for the answer while it
// holds its slot) cost the limited drain a third of the plain one's throughput: the
// requests, wake-ups and smaller admit calls, and the smaller reads and outcome chunks that
// followed from slots held longer (docs/BENCHMARKS.md, "Issue 18: limits").
//
// What admitRead leaves unmarked is admitted in the middleware (admit), message by message:
// a message of another publisher (foreign.lua adopts it first), and every message of a batch
// whose admission failed (Redis) or whose reply was lost. Asking again keeps the limits: a job
// that holds its slots already is granted as it is (admit.lua), so a concurrency slot is
// never taken twice; a job under a rate alone holds no slot, and asking again counts it
// against the rate a second time, which can only slow the rate, never exceed it; a job the
// lost call deferred has moved on, and is refused. A grant whose answer never came, or that
// a closing subscription never handed out (admitRead's context ends when the subscription
// starts closing), is given back with the job: release.lua when the worker puts it back,
// recover.lua after the worker's death. The admitter batches the middleware's requests: it
// takes every request waiting when it starts a call, so an idle worker's lone job waits for
// no timer.

// admitRequest is one job waiting for its admission.
type admitRequest struct {
	q    *keys.Queue
	item jobstate.AdmitItem
	done chan admitAnswer
}

type admitAnswer struct {
	code script.Code
	err  error
}

// admitter runs the admission calls of a worker.
type admitter struct {
	rdb  redis.UniversalClient
	reqs chan *admitRequest
	log  zerolog.Logger
	stop chan struct{}
	done chan struct{}
}

func newAdmitter(rdb redis.UniversalClient, log zerolog.Logger) *admitter {
	return &admitter{rdb: rdb, reqs: make(chan *admitRequest, 1024), log: log,
		stop: make(chan struct{}), done: make(chan struct{})}
}

func (a *admitter) run() {
	defer close(a.done)
	batch := make([]*admitRequest, 0, 4*admitBatch)
	for {
		select {
		case r := <-a.reqs:
			batch = append(batch[:0], r)
		case <-a.stop:
			return
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case r := <-a.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		a.flush(batch)
	}
}

func (a *admitter) close() {
	close(a.stop)
	<-a.done
}

// flush admits batch: one admit.lua call per queue and chunk, pipelined.
func (a *admitter) flush(batch []*admitRequest) {
	var calls []script.Call
	var groups [][]*admitRequest
	byQueue := map[*keys.Queue]int{} // the open group of each queue
	for _, r := range batch {
		g, ok := byQueue[r.q]
		if !ok || len(groups[g]) == admitBatch {
			g = len(groups)
			groups = append(groups, nil)
			byQueue[r.q] = g
		}
		groups[g] = append(groups[g], r)
	}
	for _, g := range groups {
		items := make([]jobstate.AdmitItem, len(g))
		for k, r := range g {
			items[k] = r.item
		}
		calls = append(calls, jobstate.AdmitCall(g[0].q, items))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cmds, _ := jobstate.RunCalls(ctx, a.rdb, calls)
	cancel()
	for k, g := range groups {
		var ans []jobstate.Admission
		var err error
		if k < len(cmds) && cmds[k] != nil {
			ans, err = jobstate.AdmitReply(cmds[k], len(g))
		} else {
			err = context.DeadlineExceeded
		}
		for i, r := range g {
			if err != nil {
				r.done <- admitAnswer{err: err}
			} else {
				r.done <- admitAnswer{code: ans[i].Code}
			}
		}
	}
}

// admitRead admits the jobs of msgs, a batch the subscriber read from topic, when their queue
// has limits, and reports which messages are not to run (deferred by a limit, or moved on);
// those granted are marked admitted. On a failure it marks nothing, and the middleware asks
// for each message again (admit).
func (w *Worker) admitRead(ctx context.Context, topic string, msgs []*message.Message) []bool {
	q, ok := w.queue(topic)
	if !ok || !w.limitedQueue(q) {
		return nil
	}
	items := make([]jobstate.AdmitItem, 0, len(msgs))
	idx := make([]int, 0, len(msgs)) // the index in msgs of each item
	for k, msg := range msgs {
		if msg.Metadata[stream.PoisonKey] != "" || msg.Metadata[metaForeign] != "" {
			continue // dead-lettered or adopted first, in the middleware
		}
		attempt, _, _, typ, _ := keys.ParseEntryJob(msg.Metadata[MetaJob])
		items = append(items, jobstate.AdmitItem{ID: msg.UUID, Entry: msg.Metadata[stream.EntryIDKey],
			Type: typ, Attempt: attempt})
		idx = append(idx, k)
	}
	if len(items) == 0 {
		return nil
	}
	calls := make([]script.Call, 0, (len(items)+admitBatch-1)/admitBatch)
	for k := 0; k < len(items); k += admitBatch {
		calls = append(calls, jobstate.AdmitCall(q, items[k:min(k+admitBatch, len(items))]))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cmds, _ := jobstate.RunCalls(ctx, w.rdb, calls)
	cancel()
	skip := make([]bool, len(msgs))
	for c := range calls {
		lo, hi := c*admitBatch, min((c+1)*admitBatch, len(items))
		var ans []jobstate.Admission
		err := context.DeadlineExceeded
		if c < len(cmds) && cmds[c] != nil {
			ans, err = jobstate.AdmitReply(cmds[c], hi-lo)
		}
		if err != nil {
			w.log.Debug().Err(err).Str("queue", q.Name()).Int("jobs", hi-lo).
				Msg("could not admit a read batch; admitting its jobs one by one")
			continue
		}
		for i, a := range ans {
			msg := msgs[idx[lo+i]]
			switch a.Code {
			case script.OK:
				msg.SetContext(context.WithValue(msg.Context(), admittedKey{}, true))
			case script.Deferred:
				w.log.Debug().Str("queue", q.Name()).Str("job_id", msg.UUID).Msg("job deferred by a limit")
				skip[idx[lo+i]] = true
			default: // refused: the job moved on
				skip[idx[lo+i]] = true
			}
		}
	}
	return skip
}

// admittedKey marks a message's context: its job was admitted, so its outcome gives back the
// concurrency slots it holds.
type admittedKey struct{}

// admitted reports whether ctx is the context of a message whose job was admitted.
func admitted(ctx context.Context) bool {
	v, _ := ctx.Value(admittedKey{}).(bool)
	return v
}

// admit holds msg's job to its queue's limits, when the queue has any. It reports whether the
// job is to run; when it is, and was admitted, msg's context says so (admitted). A job that is
// not to run was deferred (its entry is gone, it waits for its limit) or moved on; or the
// message's context ended (shutdown, lost lease) before an answer, and the subscriber puts the
// entry back (release.lua gives back any slot a lost answer took). An admission that fails
// (Redis) is asked again after a pause: the job may not run unadmitted.
func (w *Worker) admit(msg *message.Message) bool {
	if w.adm == nil || msg.Metadata[stream.PoisonKey] != "" || admitted(msg.Context()) {
		return true // admitted already with its read batch (admitRead)
	}
	q, ok := w.queue(msg.Metadata[stream.StreamKey])
	if !ok || !w.limitedQueue(q) {
		return true
	}
	attempt, _, _, typ, _ := keys.ParseEntryJob(msg.Metadata[MetaJob])
	r := &admitRequest{q: q, item: jobstate.AdmitItem{ID: msg.UUID, Entry: msg.Metadata[stream.EntryIDKey],
		Type: typ, Attempt: attempt}, done: make(chan admitAnswer, 1)}
	ctx := msg.Context()
	pause := 50 * time.Millisecond
	for {
		select {
		case w.adm.reqs <- r:
		case <-ctx.Done():
			return false
		}
		var ans admitAnswer
		select {
		case ans = <-r.done:
		case <-ctx.Done():
			return false
		}
		if ans.err == nil {
			switch ans.code {
			case script.OK:
				msg.SetContext(context.WithValue(ctx, admittedKey{}, true))
				return true
			case script.Deferred:
				w.log.Debug().Str("queue", q.Name()).Str("job_id", msg.UUID).Msg("job deferred by a limit")
			}
			return false
		}
		w.log.Warn().Err(ans.err).Str("queue", q.Name()).Str("job_id", msg.UUID).Dur("retry_in", pause).
			Msg("could not admit the job under its queue's limits; asking again")
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return false
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// limitedQueue reports whether q had limits at the last read (limitsWatcher). q may be a view
// of one of its priority levels (keys.Queue.AtLevel): the limits are the queue's, found by its
// level-1 stream, so a job of any level is held to them.
func (w *Worker) limitedQueue(q *keys.Queue) bool {
	m := w.limited.Load()
	return m != nil && (*m)[q.LevelStream(keys.MinPriority)]
}

// limitsWatcher is the service that reads, every LimitsRefresh, which of the worker's queues
// have limits, so that a queue without any pays nothing for admission.
type limitsWatcher struct {
	w     *Worker
	parts []string // the partitions of the session
	loop  service.Loop
}

func (l *limitsWatcher) Name() string { return "limits watcher" }

// Start reads the limits once before it returns, so that the session's first reads are
// admitted under them.
func (l *limitsWatcher) Start(ctx context.Context) error {
	l.w.readLimited(ctx, l.parts)
	l.loop.Start(ctx, func(ctx context.Context) {
		service.Every(ctx, LimitsRefresh, func(ctx context.Context) { l.w.readLimited(ctx, l.parts) })
	})
	return nil
}

func (l *limitsWatcher) Stop() { l.loop.Stop() }

// readLimited reads whether each partition the worker reads has limits. On an error the last
// answer stays.
func (w *Worker) readLimited(ctx context.Context, names []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	parts := make([]keys.Queue, len(names))
	for k, n := range names {
		parts[k] = keys.New(w.cfg.Prefix, n)
	}
	cmds := make([]*redis.IntCmd, len(parts))
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range parts {
			cmds[k] = p.Exists(ctx, q.Limits())
		}
		return nil
	})
	if err != nil {
		return
	}
	m := make(map[string]bool, len(parts))
	for k, q := range parts {
		if cmds[k].Val() > 0 {
			m[q.Stream()] = true
		}
	}
	if old := w.limited.Load(); old != nil && len(*old) == 0 && len(m) == 0 {
		return
	}
	w.limited.Store(&m)
}
