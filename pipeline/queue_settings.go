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
	// MaxWaiting bounds the queue's waiting jobs (not running, not finished: ready, scheduled,
	// in a fair group's line); 0 means no bound. A partitioned queue applies
	// ceil(MaxWaiting/partitions) to each partition. FullPolicy says what a publish at the
	// bound does: FullReject (ErrQueueFull) or FullDropOldest.
	MaxWaiting int
	FullPolicy string
	// MaxWaitingPerKey bounds each limit key's unfinished jobs (WithLimitKey: published and not
	// yet completed, dead or canceled, running ones included); 0 means no bound. A job at it
	// is refused (ErrQueueFull, QueueFullError.Key), whatever FullPolicy says. A partitioned
	// queue applies ceil(MaxWaitingPerKey/partitions) to each partition.
	MaxWaitingPerKey int
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
	// MaxWaiting sets the queue's bound on its waiting jobs (QueueSettings.MaxWaiting); 0
	// removes it.
	MaxWaiting *int
	// FullPolicy sets what a publish at the bound does: FullReject or FullDropOldest.
	FullPolicy *string
	// MaxWaitingPerKey sets the bound on each limit key's unfinished jobs
	// (QueueSettings.MaxWaitingPerKey); 0 removes it.
	MaxWaitingPerKey *int
}

// MarshalJSON writes the settings' wire form, durations in milliseconds.
func (s *QueueSettings) MarshalJSON() ([]byte, error) {
	w := settings.Settings{Queue: s.Queue, Revision: s.Revision, Paused: s.Paused, Partitions: s.Partitions,
		Limits: make([]settings.Limit, len(s.Limits)), GroupWindow: s.GroupWindow, GroupWeights: s.GroupWeights,
		Levels: s.Levels, MaxRetries: s.MaxRetries, TimeoutMS: s.Timeout.Milliseconds(), PauseUnconfirmed: s.PauseUnconfirmed,
		MaxWaiting: s.MaxWaiting, FullPolicy: s.FullPolicy, MaxWaitingPerKey: s.MaxWaitingPerKey}
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
		Limits: limitsOf(st.Limits), GroupWindow: defaultGroupWindow, GroupWeights: map[string]int{}, Levels: st.Levels}
	d := publish.ParseDefaults(st.Settings.Fields, maxMaxRetries, maxDefaultTimeout)
	out.MaxRetries, out.Timeout = d.MaxRetries, d.Timeout
	out.MaxWaiting, out.FullPolicy, out.MaxWaitingPerKey = d.MaxWaiting, FullReject, d.MaxWaitingPerKey
	if d.DropOldest {
		out.FullPolicy = FullDropOldest
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
		return // a bound alone changes no job
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
// the one way the settings change: its parts are the calls CreateQueue, SetLimit or
// DeleteLimit (the concurrency), SetGroups, the job defaults, and Pause or Resume, each with its
// own rules and errors. They apply in that order, each atomically on its own. An error names
// the part that failed; the parts before it stay applied. Every worker reading the queue
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
	fail := func(part string, err error) (*QueueSettings, error) {
		return nil, fmt.Errorf("update queue %s: %s: %w", queue, part, err)
	}
	if p := patch.Partitions; p != nil {
		if _, err := i.CreateQueue(ctx, queue, QueueOptions{Partitions: *p}); err != nil {
			return fail("partitions", err)
		}
	}
	if n := patch.Concurrency; n != nil {
		if err := i.setConcurrency(ctx, queue, *n); err != nil {
			return fail("concurrency", err)
		}
	}
	if patch.GroupWindow != nil || patch.GroupWeights != nil {
		if err := i.SetGroups(ctx, queue, patch.groupChange()); err != nil {
			return fail("groups", err)
		}
	}
	if rc, ok := settings.Patch(patch).RecordChange(); ok {
		if _, err := i.store.UpdateSettings(ctx, queue, rc); err != nil {
			return fail("defaults", err)
		}
		// This process's Clients read the new defaults on their next publish; others within
		// publish.RouteTTL.
		publish.Relayout()
	}
	var unconfirmed []string
	switch {
	case patch.Paused == nil:
	case *patch.Paused:
		pc, err := i.PauseConfirmed(ctx, queue, defaultPauseConfirmTimeout)
		if err != nil {
			return fail("pause", err)
		}
		unconfirmed = pc.Unconfirmed
	default:
		if err := i.Resume(ctx, queue); err != nil {
			return fail("resume", err)
		}
	}
	out, err := i.QueueSettings(ctx, queue)
	if errors.Is(err, ErrQueueNotFound) && patch.pauseOnly() {
		// A queue deleted while paused, resumed.
		return &QueueSettings{Queue: queue, Partitions: 1}, nil
	}
	if err != nil {
		return nil, err
	}
	out.PauseUnconfirmed = unconfirmed
	return out, nil
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
		_, err := i.DeleteLimit(ctx, queue, "", false)
		return err
	}
	return i.SetLimit(ctx, queue, l)
}

// storeErr gives an error of the store's queue changes (jobstate.ErrBusy, ErrRefused) the
// pipeline's sentinel in place of the store's, in its text and for errors.Is.
func storeErr(err error) error { return settings.StoreErr(err, ErrQueueBusy, ErrInvalid) }
