package events

import (
	"cmp"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	// DefaultFallback is how often a watched job is read again when no event came.
	DefaultFallback = 5 * time.Second
	// DefaultFallbackRate bounds those reads over all of a Watcher's watches, per second. With
	// more watches than DefaultFallback x DefaultFallbackRate, each is read less often. So the
	// Watcher's cost to Redis stays the same.
	DefaultFallbackRate = 20
	// DefaultLinger is how long a subscription outlives its last watch, so that waits that
	// follow one another on a queue do not subscribe again each time.
	DefaultLinger = 30 * time.Second
	// pingEvery is how long a subscription waits for a message before it pings its
	// connection, to find a connection that died without a word.
	pingEvery = 30 * time.Second
	// maxBackoff bounds the pause between attempts to subscribe again while Redis is down.
	maxBackoff = time.Second
)

// Config configures a Watcher. Zero fields take the defaults.
type Config struct {
	Fallback     time.Duration
	FallbackRate int
	Linger       time.Duration
	// Mode overrides ModeOf for the subscriptions (tests); nil detects.
	Mode func(ctx context.Context) Mode
}

// Watcher holds one subscription per events channel that some Watch waits on, and wakes the
// watches of the jobs its messages name. A process needs one Watcher per Redis client: any
// number of watches share its subscriptions and its fallback budget. It is safe for
// concurrent use.
type Watcher struct {
	rdb redis.UniversalClient
	cfg Config

	mu      sync.Mutex
	subs    map[string]*sub
	ring    []*Watch // fallback order: the next due first
	ringRun bool     // the fallback goroutine runs
	closed  bool
	wg      sync.WaitGroup

	delivered atomic.Int64 // events that woke a watch, for tests
	dropped   atomic.Int64 // malformed messages
}

// sub is one channel's subscription and the watches on it.
type sub struct {
	channel string
	mode    Mode
	watches map[string]map[*Watch]struct{} // by job id
	listens map[*listen]struct{}
	n       int // watches and listens on it
	cancel  context.CancelFunc
	linger  *time.Timer
	ready   bool          // a subscription was confirmed at least once
	readyCh chan struct{} // closed when ready
}

// NewWatcher returns a Watcher over rdb. Close it to end its subscriptions.
func NewWatcher(rdb redis.UniversalClient, cfg Config) *Watcher {
	cfg.Fallback = cmp.Or(cfg.Fallback, DefaultFallback)
	cfg.FallbackRate = cmp.Or(cfg.FallbackRate, DefaultFallbackRate)
	cfg.Linger = cmp.Or(cfg.Linger, DefaultLinger)
	if cfg.Mode == nil {
		cfg.Mode = func(ctx context.Context) Mode { return ModeOf(ctx, rdb) }
	}
	return &Watcher{rdb: rdb, cfg: cfg, subs: map[string]*sub{}}
}

// Watch is one waiter's interest in one job. C is signalled when an event names the job, or when
// the job must be read because events may have been missed. Signals coalesce: one may stand for
// several. Take says which.
type Watch struct {
	w       *Watcher
	channel string
	id      string
	sub     *sub // nil without events
	c       chan struct{}
	early   bool      // the caller waits in WaitReady for the first confirmation (w.mu)
	due     time.Time // next fallback read (w.mu)
	closed  bool      // (w.mu)
	status  string    // the latest event's status, not yet taken (w.mu)
	recheck bool      // (w.mu)
}

// Watch starts watching job id on channel (keys.Queue.Events of the job's queue or partition).
// The caller reads the job after Watch returns, best after WaitReady, then waits on C. Not
// before: a change between the read and the subscription would be missed. It must call Close.
func (w *Watcher) Watch(ctx context.Context, channel, id string) *Watch {
	wt := &Watch{w: w, channel: channel, id: id, c: make(chan struct{}, 1)}
	mode := w.cfg.Mode(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		wt.closed = true
		wt.recheck = true
		wt.c <- struct{}{}
		return wt
	}
	if mode != None {
		s := w.hold(channel, mode)
		byID := s.watches[id]
		if byID == nil {
			byID = map[*Watch]struct{}{}
			s.watches[id] = byID
		}
		byID[wt] = struct{}{}
		s.n++
		wt.sub = s
	}
	wt.due = time.Now().Add(w.cfg.Fallback)
	w.ring = append(w.ring, wt)
	if !w.ringRun {
		w.ringRun = true
		w.wg.Add(1)
		go w.fallback()
	}
	return wt
}

// WaitReady waits until the watch's subscription is confirmed, ctx ends or max passes. It
// reports whether it is confirmed. With no subscription, or one confirmed already, it returns at
// once.
//
// A caller that reads its job after WaitReady reported true needs no read at the confirmation,
// and gets no recheck for it. Otherwise the confirmation asks it to read again. So thousands of
// waits that start together with a new subscription read their jobs once, not twice.
func (wt *Watch) WaitReady(ctx context.Context, max time.Duration) bool {
	w := wt.w
	w.mu.Lock()
	s := wt.sub
	if s == nil || s.ready || wt.closed {
		w.mu.Unlock()
		return true
	}
	wt.early = true
	ch := s.readyCh
	w.mu.Unlock()
	t := time.NewTimer(max)
	defer t.Stop()
	ok := false
	select {
	case <-ch:
		ok = true
	case <-t.C:
	case <-ctx.Done():
	}
	w.mu.Lock()
	wt.early = false
	ok = ok || s.ready
	w.mu.Unlock()
	return ok
}

// C is signalled when the watched job may have changed; call Take to learn what happened.
func (wt *Watch) C() <-chan struct{} { return wt.c }

// Take returns what happened since the last Take. The status is that of the latest event that
// named the job ("" when none did). The flag recheck is true when the job must be read because
// an event may have been missed. That is when the subscription was made or made again, or the
// fallback interval passed.
func (wt *Watch) Take() (status string, recheck bool) {
	wt.w.mu.Lock()
	defer wt.w.mu.Unlock()
	status, recheck = wt.status, wt.recheck
	wt.status, wt.recheck = "", false
	return status, recheck
}

// Close ends the watch. A subscription with no watch left ends after Config.Linger.
func (wt *Watch) Close() {
	w := wt.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.closed {
		return
	}
	wt.closed = true
	s := w.subs[wt.channel]
	if s == nil {
		return
	}
	byID := s.watches[wt.id]
	if _, ok := byID[wt]; !ok {
		return
	}
	delete(byID, wt)
	if len(byID) == 0 {
		delete(s.watches, wt.id)
	}
	w.release(s)
}

// signal records what happened to wt and wakes it; the caller holds w.mu. Only the first signal
// since the last Take sends a token. The receiver of that token Takes the later ones with it,
// and a second token would wake it for nothing.
func (wt *Watch) signal(status string, recheck bool) {
	pending := wt.status != "" || wt.recheck
	if status != "" {
		wt.status = status
	}
	wt.recheck = wt.recheck || recheck
	if pending {
		return
	}
	select {
	case wt.c <- struct{}{}:
	default:
	}
}

// Close ends every subscription and the fallback, and wakes every watch (with recheck) a last
// time. Later watches are woken at once and never again.
func (w *Watcher) Close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		for ch, s := range w.subs {
			if s.linger != nil {
				s.linger.Stop()
			}
			s.cancel()
			if !s.ready {
				// End the WaitReadys: no confirmation comes now (and one being handled
				// must not close readyCh again).
				s.ready = true
				close(s.readyCh)
			}
			for _, byID := range s.watches {
				for wt := range byID {
					wt.signal("", true)
				}
			}
			delete(w.subs, ch)
		}
		for _, wt := range w.ring {
			if !wt.closed {
				wt.signal("", true)
			}
		}
		w.ring = nil
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// Subscriptions returns how many channels the Watcher subscribes to now, for tests.
func (w *Watcher) Subscriptions() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs)
}

// Delivered returns how many times an event woke a watch, for tests.
func (w *Watcher) Delivered() int64 { return w.delivered.Load() }

// Dropped returns how many malformed messages the Watcher ignored.
func (w *Watcher) Dropped() int64 { return w.dropped.Load() }

// subscribe starts channel's subscription; the caller holds w.mu.
func (w *Watcher) subscribe(channel string, mode Mode) *sub {
	if old := w.subs[channel]; old != nil {
		// The mode changed (detected at last): move the watches over.
		old.cancel()
		if old.linger != nil {
			old.linger.Stop()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sub{channel: channel, mode: mode, watches: map[string]map[*Watch]struct{}{},
		listens: map[*listen]struct{}{}, cancel: cancel, readyCh: make(chan struct{})}
	if old := w.subs[channel]; old != nil {
		s.watches, s.listens, s.n = old.watches, old.listens, old.n
		for _, byID := range s.watches {
			for wt := range byID {
				wt.sub = s
			}
		}
	}
	w.subs[channel] = s
	w.wg.Add(1)
	go w.run(ctx, s)
	return s
}

// run receives channel's messages until ctx ends. After an error, go-redis makes the connection
// again and subscribes again on it. Every confirmation of the subscription asks every watch on
// the channel to read its job, since messages sent meanwhile were lost. That is the first, and
// each after a reconnect.
func (w *Watcher) run(ctx context.Context, s *sub) {
	defer w.wg.Done()
	var ps *redis.PubSub
	if s.mode == Sharded {
		ps = w.rdb.SSubscribe(ctx, s.channel)
	} else {
		ps = w.rdb.Subscribe(ctx, s.channel)
	}
	// Closing the PubSub ends a Receive in progress, which ctx alone does not.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Quiet: make sure the connection still lives (an error reconnects it).
				_ = ps.Ping(ctx)
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				w.recheckAll(s)
			}
		case *redis.Message:
			evs, err := Parse(m.Payload)
			if err != nil {
				w.dropped.Add(1)
				continue
			}
			w.deliver(s, evs)
		}
	}
}

// recheckAll asks every watch on s to read its job, but at the first confirmation those that
// wait in WaitReady: they read after it.
func (w *Watcher) recheckAll(s *sub) {
	w.mu.Lock()
	var gaps []func()
	for l := range s.listens {
		if l.gap != nil {
			gaps = append(gaps, l.gap)
		}
	}
	defer func() {
		for _, gap := range gaps {
			gap()
		}
	}()
	defer w.mu.Unlock()
	first := !s.ready
	if first {
		s.ready = true
		close(s.readyCh)
	}
	for _, byID := range s.watches {
		for wt := range byID {
			if !(first && wt.early) {
				wt.signal("", true)
			}
		}
	}
}

// deliver wakes the watches of the jobs evs name and hands evs to the channel's listens.
func (w *Watcher) deliver(s *sub, evs []Event) {
	w.mu.Lock()
	for _, e := range evs {
		for wt := range s.watches[e.ID] {
			wt.signal(e.Status, false)
			w.delivered.Add(1)
		}
	}
	var fns []func([]Event)
	for l := range s.listens {
		fns = append(fns, l.fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(evs)
	}
}

// listen is one Listen.
type listen struct {
	fn  func([]Event)
	gap func() // ListenGaps'
}

// Listen hands fn every message's events on channel, for a view of a whole queue such as a live
// dashboard. Call stop to end it. fn runs on the channel's receiving goroutine, one message at a
// time: it must return quickly. Events it misses while the subscription is down are not
// replayed. Read the state again when it matters.
func (w *Watcher) Listen(ctx context.Context, channel string, fn func([]Event)) (stop func()) {
	return w.ListenGaps(ctx, channel, fn, nil)
}

// ListenGaps is Listen for a caller that must make up for the events it missed. The func gap is
// called on every confirmation of the channel's subscription: the first, made now or earlier,
// and each after a reconnect. It runs on the receiving goroutine, and must return quickly too.
//
// Every event sent after a confirmation is handed to fn until the next gap. Events sent before
// the first one, or between a drop and the next confirmation, are not. With no subscription to
// make (Mode None, or a closed Watcher) gap is never called. The caller's own fallback is then
// all there is.
func (w *Watcher) ListenGaps(ctx context.Context, channel string, fn func([]Event), gap func()) (stop func()) {
	mode := w.cfg.Mode(ctx)
	l := &listen{fn: fn, gap: gap}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || mode == None {
		return func() {}
	}
	s := w.hold(channel, mode)
	s.listens[l] = struct{}{}
	s.n++
	if gap != nil && s.ready {
		// Confirmed before this listen joined: that confirmation is its first.
		go gap()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if s := w.subs[channel]; s != nil {
				if _, ok := s.listens[l]; ok {
					delete(s.listens, l)
					w.release(s)
				}
			}
		})
	}
}

// hold returns channel's subscription in mode, made now if need be. It keeps it from ending, as
// the caller adds a watch or listen to it. The caller holds w.mu.
func (w *Watcher) hold(channel string, mode Mode) *sub {
	s := w.subs[channel]
	if s == nil || s.mode != mode {
		s = w.subscribe(channel, mode)
	}
	if s.linger != nil {
		s.linger.Stop()
		s.linger = nil
	}
	return s
}

// release drops one watch or listen from s, ending it after Config.Linger when none is left;
// the caller holds w.mu.
func (w *Watcher) release(s *sub) {
	s.n--
	if s.n == 0 && !w.closed {
		s.linger = time.AfterFunc(w.cfg.Linger, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if s.n == 0 && w.subs[s.channel] == s {
				delete(w.subs, s.channel)
				s.cancel()
			}
		})
	}
}

// Ready reports whether channel's subscription was confirmed, for tests that must not publish
// before it is.
func (w *Watcher) Ready(channel string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.subs[channel]
	return s != nil && s.ready
}

// fallback asks the watches to read their jobs again, each every Config.Fallback at most, and
// all of them together at most Config.FallbackRate times a second. It runs while some watch
// exists.
func (w *Watcher) fallback() {
	defer w.wg.Done()
	t := time.NewTicker(time.Second / time.Duration(w.cfg.FallbackRate))
	defer t.Stop()
	for range t.C {
		w.mu.Lock()
		// Closed watches leave the ring when they reach its front.
		for len(w.ring) > 0 && w.ring[0].closed {
			w.ring[0] = nil
			w.ring = w.ring[1:]
		}
		if len(w.ring) == 0 || w.closed {
			w.ringRun = false
			w.mu.Unlock()
			return
		}
		now := time.Now()
		if wt := w.ring[0]; !now.Before(wt.due) {
			w.ring[0] = nil
			w.ring = w.ring[1:]
			wt.signal("", true)
			wt.due = now.Add(w.cfg.Fallback)
			w.ring = append(w.ring, wt)
		}
		w.mu.Unlock()
	}
}
