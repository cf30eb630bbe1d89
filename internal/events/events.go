// Package events carries job events. The job-state scripts announce a job's change of status on
// its queue's events channel (keys.Queue.Events). A Watcher in each process holds one
// subscription per channel it watches. It wakes the waiters of the jobs named (Watch). A waiter
// waits for a job's end, or is a worker learning that its job was canceled. Or it hands every
// event of a queue to a function (Listen), for a live view.
//
// # Messages
//
// A message is one or more events, one a line: "<status> <attempt> <id>". A script that changes
// many jobs in one call sends one message for all of them; finish.lua applies a worker's batch
// so. So the cost to Redis is one publish per call, not per job. Messages come from the network
// and are parsed as untrusted input (Parse, with a fuzz target).
//
// # Modes
//
// Redis 7 has sharded Pub/Sub (SPUBLISH, SSUBSCRIBE). A message goes only to the shard that owns
// the channel's slot. The channel carries the queue's hash tag. So on a cluster, a queue's
// events stay on the node that holds its keys. Older servers and the embedded demo server
// (miniredis) have only PUBLISH. Detect chooses once per client, and ModeOf caches it. The
// scripts take the command to use as an argument, so they never fail for want of SPUBLISH.
//
// # Missed events
//
// Pub/Sub delivers at most once. A message sent while a subscription is being made again is
// lost, say after a dropped connection or a failover. A process that runs with Mode None, or an
// older version, sends none. So a waiter never relies on events alone. It reads the job when it
// starts waiting, and again whenever its subscription is (re)confirmed. It also reads it on a
// slow fallback tick, whose total rate the Watcher bounds (Config.FallbackRate). So the cost of
// waiting does not grow with the number of waiters.
package events

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/status"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Event is one job's change of status, or a progress report of its handler.
type Event struct {
	ID string
	// Status is a job status (scheduled, queued, in_progress, completed, failed, canceled), or
	// Progress: the job's handler reported progress (progress.lua), which is in the job's hash.
	Status  string
	Attempt int // the job's attempt count after the change (0 when the script does not know it)
}

// Progress is the Status of an event that says a job's handler reported progress; the job's
// status did not change. It is never Final.
const Progress = "progress"

// Final reports whether the event's status is one a job never leaves (but by a replay).
func (e Event) Final() bool { return Final(e.Status) }

// Final reports whether status is an end state (package status).
func Final(s string) bool {
	return status.Status(s).Final()
}

// statuses are the statuses an event may carry (Progress is none, but travels as one).
var statuses = func() map[string]bool {
	out := map[string]bool{Progress: true}
	for _, s := range status.All() {
		out[string(s)] = true
	}
	return out
}()

// maxAttempt bounds an event's attempt: more digits are not a count any job reaches.
const maxAttempt = 1_000_000_000

// ErrMessage is wrapped by Parse's errors.
var ErrMessage = errors.New("events: malformed message")

// Format writes events as a message, as the scripts do.
func Format(evs []Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Status)
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(e.Attempt))
		b.WriteByte(' ')
		b.WriteString(e.ID)
	}
	return b.String()
}

// Parse reads a message. It refuses the whole message when any line is malformed. That is a
// status it does not know, an attempt that is not a decimal count, or an id that keys.ValidID
// refuses.
func Parse(msg string) ([]Event, error) {
	if msg == "" {
		return nil, fmt.Errorf("%w: empty", ErrMessage)
	}
	out := make([]Event, 0, strings.Count(msg, "\n")+1)
	for line := range strings.SplitSeq(msg, "\n") {
		status, rest, ok1 := strings.Cut(line, " ")
		attempt, id, ok2 := strings.Cut(rest, " ")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: line %q is not \"status attempt id\"", ErrMessage, line)
		}
		if !statuses[status] {
			return nil, fmt.Errorf("%w: unknown status %q", ErrMessage, status)
		}
		n, err := strconv.Atoi(attempt)
		if err != nil || n < 0 || n > maxAttempt || strconv.Itoa(n) != attempt {
			return nil, fmt.Errorf("%w: attempt %q", ErrMessage, attempt)
		}
		if !keys.ValidID(id) {
			return nil, fmt.Errorf("%w: job id %q", ErrMessage, id)
		}
		out = append(out, Event{ID: id, Status: status, Attempt: n})
	}
	return out, nil
}

// Mode is how the scripts announce events, chosen per server by Detect.
type Mode uint8

const (
	// None: the scripts publish nothing; waiters learn of changes by reading (the fallback).
	None Mode = iota
	// Plain: PUBLISH and SUBSCRIBE, for servers without sharded Pub/Sub (Redis 6, miniredis).
	// On a cluster a plain message is broadcast to every node, a cost sharded Pub/Sub avoids.
	Plain
	// Sharded: SPUBLISH and SSUBSCRIBE (Redis 7 and later).
	Sharded
)

// Command is the publish command the scripts run in mode m: "SPUBLISH", "PUBLISH", or "" for
// none (the scripts' argument).
func (m Mode) Command() string {
	switch m {
	case Plain:
		return "PUBLISH"
	case Sharded:
		return "SPUBLISH"
	}
	return ""
}

func (m Mode) String() string {
	switch m {
	case Plain:
		return "plain"
	case Sharded:
		return "sharded"
	}
	return "none"
}

// probeChannel is the channel Detect publishes an empty message on; nobody subscribes to it.
const probeChannel = "conveyor:{events-probe}:events"

// Detect asks the server which mode it supports, with one SPUBLISH of an empty message on a
// channel nobody listens to. A server that does not know the command ("unknown command") gets
// Plain. One that refuses it otherwise, say by an ACL without the channel, gets None. So no
// script calls a command the server refuses. An error that is no reply of the server (Redis
// unreachable) is returned, for the caller to try again later.
func Detect(ctx context.Context, rdb redis.UniversalClient) (Mode, error) {
	err := rdb.SPublish(ctx, probeChannel, "").Err()
	if err == nil {
		return Sharded, nil
	}
	if rediserr.IsUnknownCommand(err) {
		return Plain, nil
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return None, nil
	}
	return None, rediserr.Wrap("events", err)
}

// retryDetect is how long ModeOf answers None after a failed Detect before it asks again.
const retryDetect = time.Second

type modeEntry struct {
	mu    sync.Mutex
	mode  Mode
	known bool
	tried time.Time
}

// modes caches Detect per client, keyed by a weak pointer so that a closed and dropped client
// leaves the cache.
var modes sync.Map // weak.Pointer[redis.Client or redis.ClusterClient] or the client itself -> *modeEntry

func entryFor(rdb redis.UniversalClient) *modeEntry {
	var key any
	var cleanup func()
	switch c := rdb.(type) {
	case *redis.Client:
		k := weak.Make(c)
		key = k
		cleanup = func() { runtime.AddCleanup(c, func(k weak.Pointer[redis.Client]) { modes.Delete(k) }, k) }
	case *redis.ClusterClient:
		k := weak.Make(c)
		key = k
		cleanup = func() {
			runtime.AddCleanup(c, func(k weak.Pointer[redis.ClusterClient]) { modes.Delete(k) }, k)
		}
	default:
		key = rdb // another client type: kept for the process's life
	}
	if e, ok := modes.Load(key); ok {
		return e.(*modeEntry)
	}
	e, loaded := modes.LoadOrStore(key, &modeEntry{})
	if !loaded && cleanup != nil {
		cleanup()
	}
	return e.(*modeEntry)
}

// ModeOf is the mode of rdb's server: Detect once per client, then from a cache. While Detect
// fails (Redis unreachable) it answers None and asks again at most once a second: the scripts
// then publish nothing and waiters rely on their fallback reads.
func ModeOf(ctx context.Context, rdb redis.UniversalClient) Mode {
	e := entryFor(rdb)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.known {
		return e.mode
	}
	if !e.tried.IsZero() && time.Since(e.tried) < retryDetect {
		return None
	}
	e.tried = time.Now()
	m, err := Detect(ctx, rdb)
	if err != nil {
		return None
	}
	e.mode, e.known = m, true
	return m
}

// SetMode fixes the mode ModeOf answers for rdb, instead of detecting it. It is for tests: a
// server whose scripts publish nothing, or plain Pub/Sub on a server that has sharded.
func SetMode(rdb redis.UniversalClient, m Mode) {
	e := entryFor(rdb)
	e.mu.Lock()
	e.mode, e.known = m, true
	e.mu.Unlock()
}
