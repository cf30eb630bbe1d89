package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/rediserr"
)

// maxClockSkew bounds how far Redis's clock may move against ours between two readings before
// the recoverer calls it a jump. For short visibility timeouts it is a tenth of the timeout.
const maxClockSkew = time.Second

// watch is what a Recoverer knows of its own observation of Redis; see "Trust" in the package
// documentation. Times are readings of the local monotonic clock (time.Now), never Redis's.
type watch struct {
	lease   time.Duration // the workers' lease-renewal period: VisibilityTimeout/3
	maxGap  time.Duration // the longest silence between two answered calls that is not a gap
	maxSkew time.Duration // the largest move of Redis's clock against ours that is not a jump
	log     *zerolog.Logger
	base    time.Time // origin of the local readings that clock offsets are taken against

	mu       sync.Mutex
	since    time.Time           // start of the current observation; zero: none (after a gap)
	last     time.Time           // answer of the latest call
	epoch    int                 // bumped by every gap: sightings of older epochs prove nothing
	hasClock bool                // offset is set
	offset   time.Duration       // Redis's clock minus ours, at the last reading
	slack    time.Duration       // uncertainty of offset: half the round trip of that reading
	seen     map[string]struct{} // entries listed by an earlier scan of this epoch
	trusted  bool                // the last check found the observation long enough (for logs)
}

func newWatch(cfg Config, log *zerolog.Logger) *watch {
	vt := cfg.VisibilityTimeout
	return &watch{
		lease:   vt / 3,
		maxGap:  min(2*cfg.Interval, vt/2),
		maxSkew: min(maxClockSkew, vt/10),
		log:     log,
		base:    time.Now(),
	}
}

// probeEvery is how often Run must reach Redis between scans so that its silences stay
// shorter than maxGap: every scan when Interval is at most maxGap/2.
func (w *watch) probeEvery() time.Duration { return w.maxGap / 2 }

// answered records a call answered at end.
func (w *watch) answered(end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.answeredLocked(end)
}

func (w *watch) answeredLocked(end time.Time) {
	switch {
	case w.since.IsZero():
		w.since = end // a new observation starts
	case end.Sub(w.last) > w.maxGap:
		w.gapLocked(fmt.Sprintf("no answer from Redis for %v", end.Sub(w.last).Round(time.Millisecond)))
		w.since = end
	}
	if end.After(w.last) {
		w.last = end
	}
}

// failed records a call that got no answer, or an error: Redis may be away.
func (w *watch) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.since.IsZero() {
		w.gapLocked("a call to Redis failed: " + err.Error())
	}
}

// clock records a reading of Redis's clock, taken by a call sent at start and answered at end.
// The reading is a gap if Redis's clock moved against ours since the last reading.
func (w *watch) clock(start, end time.Time, redisNow time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.answeredLocked(end)
	// Redis read its clock somewhere between start and end: take the middle.
	mid := start.Sub(w.base) + end.Sub(start)/2
	offset := time.Duration(redisNow.UnixNano()) - mid
	slack := end.Sub(start) / 2
	if w.hasClock {
		if moved := offset - w.offset; moved.Abs() > w.maxSkew+slack+w.slack {
			w.gapLocked(fmt.Sprintf("Redis's clock jumped by %v", moved.Round(time.Millisecond)))
			w.since = end
		}
	}
	w.hasClock, w.offset, w.slack = true, offset, slack
}

// gapLocked forgets everything observed so far; the next answered call starts a new
// observation.
func (w *watch) gapLocked(why string) {
	if w.trusted {
		w.log.Warn().Str("reason", why).Dur("wait", w.lease).
			Msg("lost sight of Redis: idle times are not trusted until it has been watched again for a lease period")
	}
	w.since = time.Time{}
	w.epoch++
	w.hasClock = false
	w.seen = nil
	w.trusted = false
}

// sightings returns the current epoch, whether the observation has lasted a lease period at
// now, and the entries listed by earlier scans of the epoch (read-only).
func (w *watch) sightings(now time.Time) (epoch int, trusted bool, seen map[string]struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	trusted = !w.since.IsZero() && now.Sub(w.since) >= w.lease
	if trusted && !w.trusted {
		ev := w.log.Debug() // at start-up
		if w.epoch > 0 {
			ev = w.log.Info() // after a gap
		}
		ev.Msg("watched Redis for a lease period: idle times are trusted")
	}
	w.trusted = trusted
	return w.epoch, trusted, w.seen
}

// valid reports whether epoch is still the current one (no gap since).
func (w *watch) valid(epoch int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epoch == epoch && !w.since.IsZero()
}

// remember keeps the entries a scan of epoch listed, for the next scan. They replace the
// earlier ones after a complete scan, and join them after a partial one.
func (w *watch) remember(epoch int, listed map[string]struct{}, complete bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.epoch != epoch || w.since.IsZero() {
		return // a gap since: these sightings prove nothing
	}
	if !complete {
		for id := range w.seen {
			listed[id] = struct{}{}
		}
	}
	w.seen = listed
}

// note records the outcome of a call sent with ctx: answered (a reply, an expected error reply
// included), failed, or neither when ctx itself ended.
func (r *Recoverer) note(ctx context.Context, err error) {
	switch {
	case err == nil || isAnswer(err):
		r.watch.answered(time.Now())
	case ctx.Err() != nil:
		// Canceled by us (shutdown, a lost lock): proves nothing either way.
	default:
		r.watch.failed(err)
	}
}

// isAnswer reports whether err is a reply that says Redis is there and working.
func isAnswer(err error) bool {
	return errors.Is(err, redis.Nil) || errors.Is(err, errFenced) || rediserr.IsNoStream(err)
}

// readClock reads Redis's clock (on the queue's node) and records it.
func (r *Recoverer) readClock(ctx context.Context) error {
	start := time.Now()
	redisNow, err := r.store.Clock(ctx, r.q)
	end := time.Now()
	if err != nil {
		r.note(ctx, err)
		return fmt.Errorf("read Redis's clock: %w", err)
	}
	now := redisNow.Add(time.Duration(r.skew.Load()))
	r.watch.clock(start, end, now)
	return nil
}
