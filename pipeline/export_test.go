package pipeline

import (
	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/publish"
)

// WaiterDelivered is how many events woke one of w's waits.
func WaiterDelivered(w *Waiter) int64 { return w.w.Delivered() }

// WaiterReady reports whether w's subscription to the events of partition (a queue name, or
// q#i) is confirmed.
func WaiterReady(w *Waiter, partition string) bool {
	return w.w.Ready(keys.New(w.c.cfg.Prefix, partition).Events())
}

// WaiterReads is how many whole reads of a job w's waits made.
func WaiterReads(w *Waiter) int64 { return w.nread.Load() }

// PausedTopics reports which of w's queues its current reading session does not read
// (Inspector.Pause), every partition of each.
func PausedTopics(w *Worker) map[string]bool {
	if l := w.loop.Load(); l != nil {
		return l.PausedTopics()
	}
	return map[string]bool{}
}

// TokenLife is how long a worker keeps a leased rate token before it gives it back.
const TokenLife = engine.TokenLife

// ProgressWrites is how many progress reports w wrote (Job.Progress).
func ProgressWrites(w *Worker) int64 {
	if l := w.loop.Load(); l != nil {
		return l.ProgressWrites.Load()
	}
	return 0
}

// PauseAckRecheck is how often PauseConfirmed reads the stored confirmations while it waits.
const PauseAckRecheck = inspect.PauseAckRecheck

// Bounds and defaults the package keeps unexported, named for the external tests.
const (
	DefaultGroupWindow  = defaultGroupWindow
	MaxAttempts         = maxAttempts
	MaxDebounceWait     = maxDebounceWait
	MaxGroupsListed     = maxGroupsListed
	MaxHeartbeatRunning = maxHeartbeatRunning
	MaxMaxRetries       = maxMaxRetries
	MaxMetadataBytes    = maxMetadataBytes
	ProgressInterval    = engine.ProgressInterval

	DefaultPageLimit       = defaultPageLimit
	MaxGroupWeights        = maxGroupWeights
	MaxLimitInterval       = maxLimitInterval
	MaxLimitRate           = maxLimitRate
	MaxMetadataEntries     = maxMetadataEntries
	MaxPartitions          = maxPartitions
	MaxQueueLimits         = maxQueueLimits
	MaxReplicas            = maxReplicas
	HistorySpanFine        = engine.HistorySpanFine
	DefaultMaxPayloadBytes = defaultMaxPayloadBytes
	MaxPageLimit           = maxPageLimit

	DefaultMaxRetries = defaultMaxRetries
	DefaultUniqueTTL  = defaultUniqueTTL
)

// MaxRunAt is maxRunAt, for the external tests.
var MaxRunAt = maxRunAt

// Layouts is how many layout changes this process made (publish.Relayout): each drops every
// Client's cached routes.
var Layouts = publish.Layouts
