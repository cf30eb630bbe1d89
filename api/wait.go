package api

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/pipeline"
)

// pollTimeout bounds one round of the poller's reads.
const pollTimeout = 5 * time.Second

// jobRef names a job.
type jobRef struct{ queue, id string }

// watch is one job that one or more long polls wait for.
type watch struct {
	ref     jobRef
	waiters int
	fetched bool          // read at least once
	job     *pipeline.Job // as last read
	err     error         // ended the watch before the job was seen (not found, Redis down)
	done    chan struct{} // closed when the job is final, on err, or when the poller closes
	ended   bool          // done is closed
}

// poller serves every long poll of a Server with one goroutine: each round it reads all the
// jobs waited for, PollConcurrency reads at a time, and wakes the requests whose job is final.
// A waiting request holds no Redis connection; all of them together hold at most
// PollConcurrency. The goroutine runs only while some request waits.
type poller struct {
	get      func(ctx context.Context, queue, id string) (*pipeline.Job, error)
	interval time.Duration
	conc     int
	log      zerolog.Logger

	mu      sync.Mutex
	watches map[jobRef]*watch
	running bool
	closed  bool
	kick    chan struct{} // a new watch: read it now rather than at the next tick
	stop    chan struct{} // closed by close
	wg      sync.WaitGroup
}

func newPoller(get func(ctx context.Context, queue, id string) (*pipeline.Job, error), interval time.Duration, conc int, log zerolog.Logger) *poller {
	return &poller{get: get, interval: interval, conc: conc, log: log,
		watches: map[jobRef]*watch{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

// add registers a waiter for ref and returns its watch; the caller must call remove. After
// close, the watch comes back already done and unread.
func (p *poller) add(ref jobRef) *watch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		w := &watch{ref: ref, done: make(chan struct{})}
		w.end()
		return w
	}
	w := p.watches[ref]
	if w == nil || w.ended && w.err != nil {
		// A watch that ended on an error is not shared with later waiters: they read again.
		w = &watch{ref: ref, done: make(chan struct{})}
		p.watches[ref] = w
	}
	w.waiters++
	if !p.running {
		p.running = true
		p.wg.Add(1)
		go p.loop()
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return w
}

// remove unregisters a waiter; the job is no longer read once nobody waits for it.
func (p *poller) remove(w *watch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.waiters--
	if w.waiters <= 0 && p.watches[w.ref] == w {
		delete(p.watches, w.ref)
	}
}

// result returns what the poller knows of the watch's job.
func (p *poller) result(w *watch) (*pipeline.Job, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.job, w.err
}

// end closes done once; the caller holds p.mu (or owns w alone).
func (w *watch) end() {
	if !w.ended {
		w.ended = true
		close(w.done)
	}
}

// close wakes every waiter (each answers with its job as it is) and stops the goroutine.
// Later waits answer at once.
func (p *poller) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
		for _, w := range p.watches {
			w.end()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// waiting returns how many requests wait, for tests.
func (p *poller) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, w := range p.watches {
		n += w.waiters
	}
	return n
}

func (p *poller) loop() {
	defer p.wg.Done()
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	// ctx ends the reads of a round when the poller closes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		onlyNew := false
		select {
		case <-p.stop:
			p.exit()
			return
		case <-p.kick:
			onlyNew = true
		case <-ticker.C:
		}
		p.mu.Lock()
		if len(p.watches) == 0 {
			// Nobody waits: end the goroutine; the next add starts another.
			p.running = false
			p.mu.Unlock()
			return
		}
		var refs []*watch
		for _, w := range p.watches {
			if !w.ended && (!onlyNew || !w.fetched) {
				refs = append(refs, w)
			}
		}
		p.mu.Unlock()
		p.round(ctx, refs)
	}
}

// exit marks the loop stopped after close.
func (p *poller) exit() {
	p.mu.Lock()
	p.running = false
	p.mu.Unlock()
}

// round reads the watched jobs, conc at a time, and wakes the waiters of the jobs that ended.
func (p *poller) round(ctx context.Context, ws []*watch) {
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	type read struct {
		job *pipeline.Job
		err error
	}
	reads := make([]read, len(ws))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(p.conc, len(ws)) {
		wg.Go(func() {
			for k := range next {
				reads[k].job, reads[k].err = p.get(ctx, ws[k].ref.queue, ws[k].ref.id)
			}
		})
	}
	for k := range ws {
		next <- k
	}
	close(next)
	wg.Wait()

	failed := 0
	var firstErr error
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, w := range ws {
		rd := reads[k]
		switch {
		case rd.err == nil:
			w.fetched, w.job = true, rd.job
			if rd.job.Status.Final() {
				w.end()
			}
		case errors.Is(rd.err, pipeline.ErrNotFound), errors.Is(rd.err, pipeline.ErrInvalid):
			// Nothing to wait for (or it expired meanwhile): answer at once.
			w.fetched, w.job, w.err = true, nil, rd.err
			w.end()
		case errors.Is(rd.err, context.Canceled) && ctx.Err() != nil:
			// Closing: the waiter answers with what it has.
		default:
			failed++
			firstErr = cmp.Or(firstErr, rd.err)
			if !w.fetched {
				// A wait must start with the job as it is: report the failure now.
				w.fetched, w.err = true, rd.err
				w.end()
			}
		}
	}
	if failed > 0 {
		p.log.Warn().Err(firstErr).Int("num_failed", failed).Int("num_jobs", len(ws)).
			Msg("long-poll read failed; retrying at the next round")
	}
}
