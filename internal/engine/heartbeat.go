package engine

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/service"
)

// HeartbeatBeats is the heartbeat record's TTL in beats: a worker that stops beating (killed,
// frozen, cut off from Redis) drops out of Inspector.Workers after this many missed beats.
const HeartbeatBeats = 3

// heartbeatPruneAfter is how long past its expiry (by the writer's clock) a member of the
// workers' index is kept before a beat prunes it. It is a margin for the clocks of the hosts
// to differ. So a host whose clock runs ahead never prunes a live worker of another.
const heartbeatPruneAfter = time.Minute

// SightingsKept is how long a beat's sightings (keys.SeenQueues, keys.SeenTypes) are kept: the
// longest window a publish can be checked over (pipeline.InspectorConfig.PublishWarningWindow).
// A day bounds the sets by the names in use in a day, not by the names ever used.
const SightingsKept = 24 * time.Hour

// Heartbeat is the worker's service that writes its heartbeat record (keys.WorkerBeat) every
// Interval, with a TTL of HeartbeatBeats beats. It keeps the worker's name in the workers'
// index (keys.Workers). And it marks each of Queues and Types seen now, by Redis's clock
// (keys.SeenQueues, keys.SeenTypes), which outlive the record: what a publish to a queue nobody
// reads is warned by. All of it is one script (one hash tag, so one node of a cluster), one
// round trip a beat. A beat also prunes the index of members expired over a minute ago and the
// sightings older than SightingsKept.
//
// A record without its member waits for the next beat to be listed. A member without its
// record is pruned by the next listing. Stop deletes the record and the member; the sightings
// stay, as they say when the worker was last seen.
//
// It costs one write of a small string every few seconds per worker. A job's path pays only
// for its type and start time, noted where the worker registers it for cancels. A beat copies
// the running jobs under that lock, O(concurrency) once every few seconds.
//
// It beats on after its session's context ends, until Stop. A session ends (a shutdown, a new
// partition count) before its running jobs have drained. The record must list them while they
// run.
type Heartbeat struct {
	Store    jobstate.Backend
	Worker   string // the worker's name
	Interval time.Duration
	Now      func() time.Time // the worker's wall clock, stamped on the record
	Log      zerolog.Logger
	// Record is the record as of now; pipeline encodes it, since its format is public.
	Record func(now time.Time) ([]byte, error)
	// Queues and Types are the queues the worker reads and the job types it has handlers for.
	Queues, Types []string

	loop  service.Loop
	spell outage.Spell
}

// Name names the service.
func (h *Heartbeat) Name() string { return "heartbeat" }

// Start writes the first beat, then one every Interval until Stop.
func (h *Heartbeat) Start(ctx context.Context) error {
	h.spell = outage.Spell{Min: h.Interval, Max: time.Minute}
	ctx = context.WithoutCancel(ctx) // see the type's comment: Stop ends it
	h.beat(ctx)
	h.loop.Start(ctx, func(ctx context.Context) {
		service.Every(ctx, h.Interval, h.beat)
	})
	return nil
}

// Stop ends the beats and removes the record: a worker that stops says so at once rather than
// after its TTL.
func (h *Heartbeat) Stop() {
	h.loop.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := h.Store.EndBeat(ctx, h.Worker); err != nil {
		h.Log.Debug().Err(err).Str("component", "heartbeat").Msg("could not remove the heartbeat record; it expires by itself")
	}
}

// beat writes the record once.
func (h *Heartbeat) beat(ctx context.Context) {
	now := h.Now()
	rec, err := h.Record(now)
	if err != nil {
		return
	}
	ttl := HeartbeatBeats * h.Interval
	cctx, cancel := context.WithTimeout(ctx, max(h.Interval, time.Second))
	err = h.Store.WriteBeat(cctx, jobstate.BeatParams{Name: h.Worker, Record: rec, TTL: ttl, Now: now,
		PruneBefore: now.Add(-heartbeatPruneAfter), Queues: h.Queues, Types: h.Types, SeenFor: SightingsKept})
	cancel()
	if err != nil {
		if step := h.spell.Failed(time.Now()); step.Log {
			h.Log.Warn().Err(err).Str("component", "heartbeat").Int("tries", step.Tries).
				Msg("cannot write the worker's heartbeat; it drops out of 'conveyor workers' until a beat gets through")
		}
		return
	}
	h.spell.OK(time.Now())
}
