package pipeline

import (
	"context"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// defaultGroupWindow is a queue's group window when none is set (Inspector.SetGroups): twice
// WorkerConfig.Concurrency's default (10). So one worker serving one group alone stays busy
// while its finished jobs' places are handed on. (An outcome is written a flush interval
// after its handler returns.) Meanwhile another group's new job waits behind at most 20 jobs of each group.
const defaultGroupWindow = keys.DefaultGroupWindow

// maxGroupWindow bounds GroupChange.Window and maxGroupWeight a weight: a window times a weight
// stays far below what a script's arithmetic holds exactly.
const (
	maxGroupWindow = 1_000_000
	maxGroupWeight = 1_000
)

// maxGroupWeights bounds how many groups of a queue may have a weight set (SetGroups refuses
// a change past it). Groups lists at most 1,000 groups. Both keep a queue's
// settings, which every partition holds, and its listing small.
const (
	maxGroupWeights = 1_000
	maxGroupsListed = 1_000
)

// GroupChange is a change of a queue's fair-group settings (Inspector.SetGroups). Fields left
// zero change nothing.
type GroupChange struct {
	// Window is how many jobs of each group may be in the queue's stream or running at once
	// (times the group's weight); 0 leaves it.
	Window int
	// ResetWindow sets the window back to the default, 20.
	ResetWindow bool
	// Weights sets groups' weights. A group of weight w gets w times the window. So it gets w
	// times the share of a group of weight 1 while both have jobs waiting. A weight of 0 sets
	// it back to 1.
	Weights map[string]int
}

// Groups is a queue's fair groups: the window, and the groups that have jobs in their window
// or waiting, or a weight set. It lists the first 1,000 of them by name.
type Groups struct {
	Queue string `json:"queue"`
	// Window is the window (20 unless set); WindowSet says whether it is set.
	Window    int         `json:"window"`
	WindowSet bool        `json:"window_set"`
	Groups    []GroupInfo `json:"groups"`
	// Total counts the groups there are; more than len(Groups) when the listing is cut short.
	Total int `json:"total"`
}

// GroupInfo is one group of a queue.
type GroupInfo struct {
	Group string `json:"group"`
	// Weight is the group's weight (1 unless set); its window is Window times Weight.
	Weight int `json:"weight"`
	// InWindow counts the group's jobs in its window: in the stream, running, or deferred by a
	// flow-control limit. Waiting counts those waiting for a place (status queued).
	InWindow int64 `json:"in_window"`
	Waiting  int64 `json:"waiting"`
}

// validate checks c as given.
func (c GroupChange) validate() error {
	switch {
	case c.Window < 0 || c.Window > maxGroupWindow:
		return invalid("group window %d outside [1, %d]", c.Window, maxGroupWindow)
	case c.Window > 0 && c.ResetWindow:
		return invalid("a group window and its reset at once")
	}
	for g, w := range c.Weights {
		if err := keys.ValidateGroup(g); err != nil {
			return invalid("%v", err)
		}
		if w < 0 || w > maxGroupWeight {
			return invalid("weight %d of group %q outside [1, %d] (0 sets it back to 1)", w, g, maxGroupWeight)
		}
	}
	return nil
}

// existingQueue checks that queue is a valid name of an existing queue (else ErrQueueNotFound, as
// it is) and returns its partitions.
func (i *Inspector) existingQueue(ctx context.Context, queue string) ([]keys.Queue, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	ok, err := i.QueueExists(ctx, queue)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrQueueNotFound
	}
	return i.partitions(ctx, queue)
}

// SetGroups changes queue's fair-group settings, kept in Redis for every publisher and worker.
// They apply from the next job that enters or leaves a window. A raised window fills as the
// group's jobs finish: each finish moves as many waiting jobs in as the window has room for.
// A lowered one empties to its new size the same way. A partitioned queue gets the same
// settings in every partition, each of which keeps its own windows. A change of the partition
// count (CreateQueue) carries them into the new layout. The queue must exist. At most 1,000
// groups of a queue may have a weight; a change past that is refused and applied in no part.
func (i *Inspector) SetGroups(ctx context.Context, queue string, c GroupChange) error {
	if err := c.validate(); err != nil {
		return err
	}
	if _, err := i.existingQueue(ctx, queue); err != nil {
		return err
	}
	unlock, err := i.store.HoldLayout(ctx, queue)
	if err != nil {
		return storeErr(err)
	}
	defer unlock()
	// Checked before the lock so that a refused queue writes nothing, and again under it: a
	// change of the partition count copies the settings, and one written after the copy is lost.
	if _, err := i.existingQueue(ctx, queue); err != nil {
		return err
	}
	ch := jobstate.GroupChange{Window: int64(c.Window), ResetWindow: c.ResetWindow,
		Weights: make(map[string]int64, len(c.Weights))}
	for g, w := range c.Weights {
		ch.Weights[g] = int64(w)
	}
	return storeErr(i.store.PutGroups(ctx, jobstate.PutGroupsParams{Queue: queue, Change: ch, MaxWeights: maxGroupWeights}))
}

// Groups returns queue's fair groups, by name, with their counts summed over its partitions.
func (i *Inspector) Groups(ctx context.Context, queue string) (*Groups, error) {
	qs, err := i.existingQueue(ctx, queue)
	if err != nil {
		return nil, err
	}
	set, err := jobstate.ReadGroupSettings(ctx, i.rdb, qs[0])
	if err != nil {
		return nil, err
	}
	counts, total, err := i.store.ReadGroups(ctx, qs, maxGroupsListed)
	if err != nil {
		return nil, err
	}
	out := &Groups{Queue: queue, Window: defaultGroupWindow, Groups: make([]GroupInfo, len(counts)), Total: total}
	if set.Window > 0 {
		out.Window, out.WindowSet = int(set.Window), true
	}
	for k, c := range counts {
		w := 1
		if n, ok := set.Weights[c.Group]; ok {
			w = int(n)
		}
		out.Groups[k] = GroupInfo{Group: c.Group, Weight: w, InWindow: c.InWindow, Waiting: c.Waiting}
	}
	return out, nil
}
