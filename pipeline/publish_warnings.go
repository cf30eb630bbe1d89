package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// DefaultPublishWarningWindow is how far back a publish is checked for a worker that read its
// queue and handled its types (InspectorConfig.PublishWarningWindow).
const DefaultPublishWarningWindow = 10 * time.Minute

// maxKnownQueues bounds the queues a warning names as read, so that a deployment of hundreds
// of queues does not make a warning of pages.
const maxKnownQueues = 10

// Sightings is what the workers' heartbeats said in the last Window: when, by Redis's clock, a
// live worker last read each queue and last had a handler for each job type. Each beat writes
// them (every HeartbeatInterval, 5 s), and they outlive the heartbeat record, so a queue read an
// hour ago by a worker since stopped is told from a queue never read.
//
// A worker with DisableHeartbeat writes none, and neither does one of a version before
// sightings were written: publishes to the queues only such workers read are warned about.
type Sightings struct {
	// Queues maps each queue a worker read in the window to the last beat that said so.
	Queues map[string]time.Time
	// Types maps each job type a worker had a handler for in the window to the last beat that
	// said so, whatever queue that worker read.
	Types map[string]time.Time
	// Now is Redis's clock when they were read; Window the Inspector's PublishWarningWindow.
	Now    time.Time
	Window time.Duration
}

// Sightings reads the workers' sightings of the last PublishWarningWindow, in one round trip.
// A caller that checks many publishes (an HTTP server) reads them once every few seconds and
// asks each publish of them (Sightings.PublishWarnings).
func (i *Inspector) Sightings(ctx context.Context) (Sightings, error) {
	s, err := i.store.Sightings(ctx, i.cfg.PublishWarningWindow)
	if err != nil {
		return Sightings{}, err
	}
	return Sightings{Queues: s.Queues, Types: s.Types, Now: s.Now, Window: i.cfg.PublishWarningWindow}, nil
}

// PublishWarnings returns what a publish of jobs of types to queue should be told, one line
// each: that no worker has read queue in the last PublishWarningWindow (10 minutes unless
// configured), or, when some worker has, that none has handled a type on any queue in that
// time. A mistake gives one warning: a queue nobody reads is not also warned about for its
// types. It never refuses anything: a publish is valid whether or not a worker runs yet (a
// deploy publishes before its workers start). It reads the workers' sightings in one round
// trip (Sightings); nil when there is nothing to say.
func (i *Inspector) PublishWarnings(ctx context.Context, queue string, types ...string) ([]string, error) {
	s, err := i.Sightings(ctx)
	if err != nil {
		return nil, err
	}
	return s.PublishWarnings(queue, types...), nil
}

// PublishWarnings is Inspector.PublishWarnings over s: a sighting counts when it is at most
// Window before Now.
func (s Sightings) PublishWarnings(queue string, types ...string) []string {
	since := s.Now.Add(-s.Window)
	recent := func(m map[string]time.Time, name string) bool {
		at, ok := m[name]
		return ok && !at.Before(since)
	}
	if !recent(s.Queues, queue) {
		var read []string
		for q := range s.Queues {
			if recent(s.Queues, q) {
				read = append(read, q)
			}
		}
		slices.Sort(read)
		known := "no worker has sent a heartbeat in that time"
		if len(read) > 0 {
			more := ""
			if len(read) > maxKnownQueues {
				more = fmt.Sprintf(" and %d more", len(read)-maxKnownQueues)
				read = read[:maxKnownQueues]
			}
			known = "known queues read: " + strings.Join(read, ", ") + more
		}
		return []string{fmt.Sprintf("no worker has read queue %q in the last %s (%s)", queue, s.Window, known)}
	}
	var out []string
	seen := map[string]bool{}
	for _, t := range types {
		if t == "" || seen[t] || recent(s.Types, t) {
			continue
		}
		seen[t] = true
		w := fmt.Sprintf("no worker has handled type %q on any queue in the last %s", t, s.Window)
		if near := nearest(t, slices.Sorted(maps.Keys(s.Types))); near != "" && recent(s.Types, near) {
			w += fmt.Sprintf(" (did you mean %q?)", near)
		}
		out = append(out, w)
	}
	return out
}

// nearest is the name of names closest to name by edits (a letter added, dropped, changed, or
// two swapped), when it is within a third of name's length and one edit at least: a typo, not
// another word. Ties go to the first in names.
func nearest(name string, names []string) string {
	best, bestD := "", max(1, len(name)/3)+1
	for _, n := range names {
		if d := edits(name, n); n != name && d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// edits is the optimal string alignment distance between a and b, over bytes: the Levenshtein
// distance with a swap of two neighbours as one edit ("ecoh" is one from "echo").
func edits(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
