package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// QueueSettings is a queue's settings, one record (UpdateQueue changes it): the pause, the
// partition count, the limits and the fair-group settings. Revision rises with every change
// made through UpdateQueue or the calls it stands for (Pause, Resume, SetLimit, DeleteLimit,
// SetGroups, CreateQueue); 0 means the queue's settings were never changed by this version.
type QueueSettings struct {
	Queue      string
	Revision   int64
	Paused     bool
	Partitions int
	// Limits are the queue's limits, as Limits lists them.
	Limits []Limit
	// GroupWindow is the fair-group window (DefaultGroupWindow unless set); GroupWeights the
	// weights set, by group.
	GroupWindow  int
	GroupWeights map[string]int
	// Levels are the priority levels above 1 that the queue's jobs were published with.
	Levels []int
	// PauseUnconfirmed names, after an UpdateQueue that paused the queue, the live workers
	// that did not confirm the pause in time (PauseConfirmed).
	PauseUnconfirmed []string
}

// QueuePatch is a change of a queue's settings (UpdateQueue): a nil field changes nothing.
type QueuePatch struct {
	// Paused pauses (Pause, waiting for the confirmations) or resumes (Resume) the queue.
	Paused *bool
	// Concurrency sets the concurrency of the queue's whole-queue limit (SetLimit with no type
	// and no key), keeping its rate; 0 removes the concurrency, and the limit with it when it
	// has no rate.
	Concurrency *int
	// Partitions changes the partition count (CreateQueue, without a drain).
	Partitions *int
	// GroupWindow sets the fair-group window; 0 sets it back to DefaultGroupWindow.
	GroupWindow *int
	// GroupWeights sets groups' weights; a weight of 0 sets it back to 1 (SetGroups).
	GroupWeights map[string]int
}

// settingsJSON is the wire form of QueueSettings: the HTTP API's and `conveyor queues set
// --json`'s. Its limits have the fields of the limits routes.
type settingsJSON struct {
	Queue            string         `json:"queue"`
	Revision         int64          `json:"revision"`
	Paused           bool           `json:"paused"`
	Partitions       int            `json:"partitions"`
	Limits           []limitJSON    `json:"limits"`
	GroupWindow      int            `json:"group_window"`
	GroupWeights     map[string]int `json:"group_weights"`
	Levels           []int          `json:"levels"`
	PauseUnconfirmed []string       `json:"pause_unconfirmed,omitempty"`
}

type limitJSON struct {
	Queue       string `json:"queue"`
	Type        string `json:"type"`
	PerKey      bool   `json:"per_key"`
	Rate        int    `json:"rate"`
	IntervalMS  int64  `json:"interval_ms"`
	Concurrency int    `json:"concurrency"`
}

// MarshalJSON writes the settings' wire form, durations in milliseconds.
func (s *QueueSettings) MarshalJSON() ([]byte, error) {
	w := settingsJSON{Queue: s.Queue, Revision: s.Revision, Paused: s.Paused, Partitions: s.Partitions,
		Limits: make([]limitJSON, len(s.Limits)), GroupWindow: s.GroupWindow, GroupWeights: s.GroupWeights,
		Levels: s.Levels, PauseUnconfirmed: s.PauseUnconfirmed}
	for k, l := range s.Limits {
		w.Limits[k] = limitJSON{Queue: s.Queue, Type: l.Type, PerKey: l.PerKey, Rate: l.Rate,
			IntervalMS: l.Interval.Milliseconds(), Concurrency: l.Concurrency}
	}
	return json.Marshal(w)
}

// patchJSON is the wire form of QueuePatch (PATCH /v1/queues/{queue}/settings).
type patchJSON struct {
	Paused       *bool          `json:"paused"`
	Concurrency  *int           `json:"concurrency"`
	Partitions   *int           `json:"partitions"`
	GroupWindow  *int           `json:"group_window"`
	GroupWeights map[string]int `json:"group_weights"`
}

// UnmarshalJSON reads the patch's wire form, refusing fields it does not know: a misspelt
// field would otherwise change nothing and say nothing.
func (p *QueuePatch) UnmarshalJSON(b []byte) error {
	var w patchJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*p = QueuePatch{Paused: w.Paused, Concurrency: w.Concurrency, Partitions: w.Partitions,
		GroupWindow: w.GroupWindow, GroupWeights: w.GroupWeights}
	return nil
}

// store is the inspector's view of job and queue state.
func (i *Inspector) store() *jobstate.Store { return jobstate.NewStore(i.rdb, i.cfg.Prefix) }

// QueueSettings reads queue's settings. A queue that does not exist is ErrQueueNotFound.
func (i *Inspector) QueueSettings(ctx context.Context, queue string) (*QueueSettings, error) {
	if err := i.mustExist(ctx, queue); err != nil {
		return nil, err
	}
	sts, err := i.store().ReadSettings(ctx, []string{queue})
	if err != nil {
		return nil, err
	}
	out := &QueueSettings{Queue: queue, Revision: sts[0].Rev, Paused: sts[0].Paused}
	if out.Partitions, err = i.Partitions(ctx, queue); err != nil {
		return nil, err
	}
	if out.Limits, err = i.Limits(ctx, queue); err != nil {
		return nil, err
	}
	// Every partition holds the same group settings (SetGroups).
	qs := allPartitions(i.cfg.Prefix, queue, out.Partitions)
	set, err := jobstate.ReadGroupSettings(ctx, i.rdb, qs[0])
	if err != nil {
		return nil, err
	}
	out.GroupWindow, out.GroupWeights = DefaultGroupWindow, map[string]int{}
	if set.Window > 0 {
		out.GroupWindow = int(set.Window)
	}
	for grp, w := range set.Weights {
		out.GroupWeights[grp] = int(w)
	}
	levels, err := jobstate.QueueLevels(ctx, i.rdb, qs)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, ls := range levels {
		for _, l := range ls {
			seen[l] = true
		}
	}
	out.Levels = append([]int{}, slices.Sorted(maps.Keys(seen))...) // [] in JSON, not null
	return out, nil
}

// validate checks p as given.
func (p QueuePatch) validate() error {
	if p.Concurrency != nil && *p.Concurrency < 0 {
		return invalid("concurrency %d is negative", *p.Concurrency)
	}
	if p.Partitions != nil && (*p.Partitions < 1 || *p.Partitions > MaxPartitions) {
		return invalid("partitions %d outside 1..%d", *p.Partitions, MaxPartitions)
	}
	if p.GroupWindow != nil || p.GroupWeights != nil {
		return p.groupChange().validate()
	}
	return nil
}

// pauseOnly reports whether p changes nothing but the pause.
func (p QueuePatch) pauseOnly() bool {
	p.Paused = nil
	return reflect.DeepEqual(p, QueuePatch{})
}

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
// the order partitions, concurrency, groups, pause, each atomically on its own: an error names
// the part that failed, and the parts before it stay applied. Every worker reading the queue
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
	if p := patch.Partitions; p != nil {
		if _, err := i.CreateQueue(ctx, queue, QueueOptions{Partitions: *p}); err != nil {
			return nil, fmt.Errorf("update queue %s: partitions: %w", queue, err)
		}
	}
	if c := patch.Concurrency; c != nil {
		if err := i.setConcurrency(ctx, queue, *c); err != nil {
			return nil, fmt.Errorf("update queue %s: concurrency: %w", queue, err)
		}
	}
	if patch.GroupWindow != nil || patch.GroupWeights != nil {
		if err := i.SetGroups(ctx, queue, patch.groupChange()); err != nil {
			return nil, fmt.Errorf("update queue %s: groups: %w", queue, err)
		}
	}
	var unconfirmed []string
	switch {
	case patch.Paused == nil:
	case *patch.Paused:
		pc, err := i.PauseConfirmed(ctx, queue, DefaultPauseConfirmTimeout)
		if err != nil {
			return nil, fmt.Errorf("update queue %s: pause: %w", queue, err)
		}
		unconfirmed = pc.Unconfirmed
	default:
		if err := i.Resume(ctx, queue); err != nil {
			return nil, fmt.Errorf("update queue %s: resume: %w", queue, err)
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

// settingsChanged announces a change of queue's settings kept outside its record (limits,
// group settings, partition count) to the workers.
func (i *Inspector) settingsChanged(ctx context.Context, queue string) error {
	if err := i.store().BumpSettings(ctx, queue); err != nil {
		return fmt.Errorf("announce the change of queue %s's settings (workers find it within %v): %w",
			queue, partitionsCheckEvery, err)
	}
	return nil
}
