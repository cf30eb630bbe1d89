package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/internal/settings"
)

// QueueSettings is a queue's settings, one record (UpdateQueue changes it): the pause, the
// partition count, the limits and the fair-group settings. Revision rises with every change
// (UpdateQueue, or a call it stands for: Pause, SetLimit, SetGroups, CreateQueue). 0 means no
// change was made by this version.
type QueueSettings struct {
	Queue      string
	Revision   int64
	Paused     bool
	Partitions int
	// Limits are the queue's limits, as Limits lists them.
	Limits []Limit
	// GroupWindow is the fair-group window (20 unless set); GroupWeights the
	// weights set, by group.
	GroupWindow  int
	GroupWeights map[string]int
	// Levels are the priority levels above 1 that the queue's jobs were published with.
	Levels []int
	// MaxRetries is the retry count of the jobs published without WithMaxRetries; nil leaves
	// them the Client's (ClientConfig.MaxRetries). Timeout is the timeout of those published
	// without WithTimeout; 0 means none.
	MaxRetries *int
	Timeout    time.Duration
	// PauseUnconfirmed names, after an UpdateQueue that paused the queue, the live workers
	// that did not confirm the pause in time (PauseConfirmed).
	PauseUnconfirmed []string
}

// QueuePatch is a change of a queue's settings (UpdateQueue): a nil field changes nothing.
type QueuePatch struct {
	// Paused pauses (Pause, waiting for the confirmations) or resumes (Resume) the queue.
	Paused *bool
	// Concurrency sets the concurrency of the queue's whole-queue limit (SetLimit with no type
	// and no key), keeping its rate. Zero removes the concurrency, and the limit too when
	// it has no rate.
	Concurrency *int
	// Partitions changes the partition count (CreateQueue, without a drain).
	Partitions *int
	// GroupWindow sets the fair-group window; 0 sets it back to the default, 20.
	GroupWindow *int
	// GroupWeights sets groups' weights; a weight of 0 sets it back to 1 (SetGroups).
	GroupWeights map[string]int
	// MaxRetries sets the queue's default retry count (QueueSettings.MaxRetries); -1 removes it.
	MaxRetries *int
	// Timeout sets the queue's default timeout, kept in whole milliseconds; 0 removes it.
	Timeout *time.Duration
}

// MarshalJSON writes the settings' wire form, durations in milliseconds.
func (s *QueueSettings) MarshalJSON() ([]byte, error) {
	w := settings.Settings{Queue: s.Queue, Revision: s.Revision, Paused: s.Paused, Partitions: s.Partitions,
		Limits: make([]settings.Limit, len(s.Limits)), GroupWindow: s.GroupWindow, GroupWeights: s.GroupWeights,
		Levels: s.Levels, MaxRetries: s.MaxRetries, TimeoutMS: s.Timeout.Milliseconds(), PauseUnconfirmed: s.PauseUnconfirmed}
	for k, l := range s.Limits {
		w.Limits[k] = settings.Limit{Queue: s.Queue, Type: l.Type, PerKey: l.PerKey, Rate: l.Rate,
			IntervalMS: l.Interval.Milliseconds(), Concurrency: l.Concurrency}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the patch's wire form, refusing fields it does not know: a misspelt
// field would otherwise change nothing and say nothing.
func (p *QueuePatch) UnmarshalJSON(b []byte) error {
	w, err := settings.DecodePatch(b, patchBounds)
	if err == nil {
		*p = QueuePatch(w)
	}
	return err
}

// patchBounds are QueuePatch's limits, and the error its refusals wrap.
var patchBounds = settings.Bounds{MaxPartitions: maxPartitions, MaxRetries: maxMaxRetries,
	MaxTimeout: maxDefaultTimeout, Invalid: ErrInvalid}

// QueueSettings reads queue's settings. A queue that does not exist is ErrQueueNotFound.
func (i *Inspector) QueueSettings(ctx context.Context, queue string) (*QueueSettings, error) {
	if err := i.mustExist(ctx, queue); err != nil {
		return nil, err
	}
	st, err := i.store.ReadQueueState(ctx, queue)
	if err != nil {
		return nil, err
	}
	out := &QueueSettings{Queue: queue, Revision: st.Settings.Rev, Paused: st.Settings.Paused, Partitions: st.Partitions,
		Limits: make([]Limit, len(st.Limits)), GroupWindow: defaultGroupWindow, GroupWeights: map[string]int{}, Levels: st.Levels}
	d := publish.ParseDefaults(st.Settings.Fields, maxMaxRetries, maxDefaultTimeout)
	out.MaxRetries, out.Timeout = d.MaxRetries, d.Timeout
	for k, l := range st.Limits {
		out.Limits[k] = limitOf(l)
	}
	if st.Groups.Window > 0 {
		out.GroupWindow = int(st.Groups.Window)
	}
	for grp, w := range st.Groups.Weights {
		out.GroupWeights[grp] = int(w)
	}
	return out, nil
}

// validate checks p as given.
func (p QueuePatch) validate() error {
	if err := settings.Patch(p).Validate(patchBounds); err != nil {
		return err
	}
	if p.GroupWindow != nil || p.GroupWeights != nil {
		return p.groupChange().validate()
	}
	return nil
}

// maxDefaultTimeout bounds QueuePatch.Timeout: a week, far beyond any job's attempt.
const maxDefaultTimeout = 7 * 24 * time.Hour

// applyDefaults gives a prepared job (j, and nj, what the script writes) the defaults d that
// its options leave to the queue. The options are common, then the task's own. The queue's
// defaults win over the Client's. Applying the options again is cheap, and keeps prepare free
// of Redis, so bad input fails first.
func applyDefaults(d publish.Defaults, common []Option, t *Task, j *Job, nj *jobstate.NewJob) {
	if d.MaxRetries == nil && d.Timeout == 0 {
		return
	}
	var o enqueueOptions
	for _, opt := range common {
		opt(&o)
	}
	for _, opt := range t.Opts {
		opt(&o)
	}
	if d.MaxRetries != nil && !o.hasRetries {
		nj.MaxRetries, j.MaxRetries = *d.MaxRetries, *d.MaxRetries
	}
	if d.Timeout > 0 && o.timeout == 0 {
		nj.Timeout, j.Timeout = d.Timeout, d.Timeout
	}
}

// pauseOnly reports whether p changes nothing but the pause.
func (p QueuePatch) pauseOnly() bool { return settings.Patch(p).PauseOnly() }

func (p QueuePatch) groupChange() GroupChange {
	c := GroupChange{Weights: p.GroupWeights}
	if p.GroupWindow != nil {
		c.Window, c.ResetWindow = *p.GroupWindow, *p.GroupWindow == 0
	}
	return c
}

// UpdateQueue changes queue's settings by patch and returns them as they are after it. It is
// the one way the settings change: Pause, Resume, SetLimit, DeleteLimit, SetGroups and
// CreateQueue are its parts, and each part keeps its own rules and errors. The parts apply in
// the order partitions, concurrency, groups, job defaults, pause, each atomically on its own.
// An error names the part that failed; the parts before it stay applied. Every worker reading the queue
// learns of a change at once (a notice), or within PauseCheckInterval should it miss it. A
// queue that does not exist is ErrQueueNotFound (but a resume alone of a paused one passes).
func (i *Inspector) UpdateQueue(ctx context.Context, queue string, patch QueuePatch) (*QueueSettings, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	if err := patch.validate(); err != nil {
		return nil, err
	}
	if !patch.pauseOnly() {
		if err := i.mustExist(ctx, queue); err != nil {
			return nil, err
		}
	}
	c := queueChange{concurrency: patch.Concurrency, paused: patch.Paused}
	if p := patch.Partitions; p != nil {
		c.layout = &QueueOptions{Partitions: *p}
	}
	if patch.GroupWindow != nil || patch.GroupWeights != nil {
		g := patch.groupChange()
		c.groups = &g
	}
	if rc, ok := settings.Patch(patch).RecordChange(); ok {
		c.defaults = &rc
	}
	done, err := i.apply(ctx, queue, c)
	if pe := (*partError)(nil); errors.As(err, &pe) {
		return nil, fmt.Errorf("update queue %s: %s: %w", queue, pe.part, pe.err)
	}
	if err != nil {
		return nil, err
	}
	out, err := i.QueueSettings(ctx, queue)
	if errors.Is(err, ErrQueueNotFound) && patch.pauseOnly() {
		// A queue deleted while paused, resumed.
		return &QueueSettings{Queue: queue, Partitions: 1}, nil
	}
	if err != nil {
		return nil, err
	}
	out.PauseUnconfirmed = done.unconfirmed
	return out, nil
}

// queueChange is one change of a queue's settings: the parts an UpdateQueue patch names, or
// the one part of an alias (CreateQueue, SetLimit, DeleteLimit, SetGroups). apply is the one
// path of every change.
type queueChange struct {
	layout      *QueueOptions // CreateQueue
	concurrency *int
	limit       *Limit      // SetLimit
	dropLimit   *limitScope // DeleteLimit
	groups      *GroupChange
	defaults    *jobstate.SettingsChange // the settings record's job defaults
	paused      *bool                    // Pause (waiting for the confirmations) or Resume
}

// queueChanged is what apply did that a caller returns.
type queueChanged struct {
	info        *QueueInfo // of the layout part
	hadLimit    bool       // of the dropLimit part
	unconfirmed []string   // of a pause
}

// partError is the error of the part of a change that failed. It reads as the part's own
// error, which an alias returns as it is; UpdateQueue names the part.
type partError struct {
	part string
	err  error
}

func (e *partError) Error() string { return e.err.Error() }
func (e *partError) Unwrap() error { return e.err }

// apply makes change c of queue's settings, part by part in a fixed order, each with its own
// checks. It stops at the first part that fails, returning a *partError.
func (i *Inspector) apply(ctx context.Context, queue string, c queueChange) (queueChanged, error) {
	var done queueChanged
	var err error
	fail := func(part string, err error) (queueChanged, error) { return done, &partError{part, err} }
	if c.layout != nil {
		if done.info, err = i.setLayout(ctx, queue, *c.layout); err != nil {
			return fail("partitions", err)
		}
	}
	if c.concurrency != nil {
		if err := i.setConcurrency(ctx, queue, *c.concurrency); err != nil {
			return fail("concurrency", err)
		}
	}
	if c.limit != nil {
		if err := i.putLimit(ctx, queue, *c.limit); err != nil {
			return fail("limit", err)
		}
	}
	if c.dropLimit != nil {
		if done.hadLimit, err = i.dropLimit(ctx, queue, *c.dropLimit); err != nil {
			return fail("limit", err)
		}
	}
	if c.groups != nil {
		if err := i.putGroups(ctx, queue, *c.groups); err != nil {
			return fail("groups", err)
		}
	}
	if c.defaults != nil {
		if _, err := i.store.UpdateSettings(ctx, queue, *c.defaults); err != nil {
			return fail("defaults", err)
		}
		// This process's Clients read the new defaults on their next publish; others within
		// publish.RouteTTL.
		publish.Relayout()
	}
	switch {
	case c.paused == nil:
	case *c.paused:
		pc, err := i.PauseConfirmed(ctx, queue, defaultPauseConfirmTimeout)
		if err != nil {
			return fail("pause", err)
		}
		done.unconfirmed = pc.Unconfirmed
	default:
		if err := i.Resume(ctx, queue); err != nil {
			return fail("resume", err)
		}
	}
	return done, nil
}

// setConcurrency sets the concurrency of queue's whole-queue limit to n, keeping its rate.
func (i *Inspector) setConcurrency(ctx context.Context, queue string, n int) error {
	ls, err := i.Limits(ctx, queue)
	if err != nil {
		return err
	}
	var l Limit
	for _, cur := range ls {
		if cur.Type == "" && !cur.PerKey {
			l = cur
		}
	}
	l.Concurrency = n
	if l.Concurrency == 0 && l.Rate == 0 {
		_, err := i.dropLimit(ctx, queue, limitScope{})
		return err
	}
	return i.putLimit(ctx, queue, l)
}

// storeErr gives an error of the store's queue changes (jobstate.ErrBusy, ErrRefused) the
// pipeline's sentinel in place of the store's, in its text and for errors.Is.
func storeErr(err error) error { return settings.StoreErr(err, ErrQueueBusy, ErrInvalid) }
