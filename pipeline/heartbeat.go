package pipeline

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/engine"
)

// defaultHeartbeatInterval is how often a worker writes its heartbeat record
// (WorkerConfig.HeartbeatInterval).
const defaultHeartbeatInterval = 5 * time.Second

// heartbeatBeats is the heartbeat record's TTL in beats (engine.Heartbeat).
const heartbeatBeats = engine.HeartbeatBeats

// maxHeartbeatRunning bounds the running jobs a heartbeat record lists (the longest-running
// first); WorkerInfo.RunningMore counts the rest.
const maxHeartbeatRunning = 100

// WorkerInfo is a live worker as its heartbeat record says (Inspector.Workers): what it reads,
// what it runs now, and when it last said so.
//
// Liveness is Redis's clock. The record expires (a TTL of three beats, set by Redis) when the
// worker stops beating. HeartbeatAge is measured by Redis too: the record's TTL minus what is
// left of it. So hosts whose clocks differ cannot make a dead worker look alive or a live one
// dead. Started, LastHeartbeat and each running job's Started are the worker host's clock, as
// it wrote them.
type WorkerInfo struct {
	// Name is the worker's consumer name (WorkerConfig.Name): a job's Worker.
	Name    string
	Host    string
	PID     int
	Version string // the Conveyor module's version the worker was built with; "(devel)" when unknown
	// Queues are the queues it reads (WorkerConfig.Queues), Concurrency its bound of jobs at once.
	Queues      []string
	Concurrency int
	// Types are the job types it has handlers for (Worker.Handle), sorted; empty in the
	// record of a version before types were written, which then counts as handling every type.
	Types []string
	// Running are the jobs its handlers run now, longest-running first, at most 100;
	// RunningMore counts those not listed.
	Running     []RunningJob
	RunningMore int
	// Started is when the worker's Run began; LastHeartbeat when it wrote this record.
	Started       time.Time
	LastHeartbeat time.Time
	// HeartbeatAge is how long ago Redis received the record, by Redis's clock.
	HeartbeatAge time.Duration
	// HeartbeatInterval is the worker's time between beats; the record expires after three.
	HeartbeatInterval time.Duration
}

// RunningJob is a job a worker runs now, in its heartbeat record.
type RunningJob struct {
	ID, Queue, Type string
	// Started is when the worker handed it to its handler (the worker host's clock).
	Started time.Time
}

// MarshalJSON writes {"name", "host", "pid", "version", "queues", "types", "concurrency", "running":
// [{"id", "queue", "type", "started_at"}], "running_more", "started_at", "heartbeat_at",
// "heartbeat_age_ms", "heartbeat_interval_ms"}, times as unix milliseconds, running, queues and
// types arrays (never null).
func (w WorkerInfo) MarshalJSON() ([]byte, error) { return json.Marshal(w.wire()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (w *WorkerInfo) UnmarshalJSON(b []byte) error {
	var v engine.Record
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*w = WorkerInfo{Name: v.Name, Host: v.Host, PID: v.PID, Version: v.Version, Queues: v.Queues, Types: v.Types,
		Concurrency: v.Concurrency, RunningMore: v.RunningMore, Started: fromUnixMS(v.StartedAt),
		LastHeartbeat: fromUnixMS(v.HeartbeatAt), HeartbeatAge: time.Duration(v.HeartbeatAgeMS) * time.Millisecond,
		HeartbeatInterval: time.Duration(v.HeartbeatInterval) * time.Millisecond}
	for _, r := range v.Running {
		w.Running = append(w.Running, RunningJob{ID: r.ID, Queue: r.Queue, Type: r.Type, Started: fromUnixMS(r.StartedAt)})
	}
	return nil
}

// wire is w's wire form (engine.Record).
func (w WorkerInfo) wire() engine.Record {
	v := engine.Record{Name: w.Name, Host: w.Host, PID: w.PID, Version: w.Version, Queues: w.Queues,
		Concurrency: w.Concurrency, Running: make([]engine.RunningRecord, 0, len(w.Running)), RunningMore: w.RunningMore,
		StartedAt: unixMS(w.Started), HeartbeatAt: unixMS(w.LastHeartbeat), HeartbeatAgeMS: w.HeartbeatAge.Milliseconds(),
		HeartbeatInterval: w.HeartbeatInterval.Milliseconds()}
	if v.Queues == nil {
		v.Queues = []string{}
	}
	if v.Types = w.Types; v.Types == nil {
		v.Types = []string{}
	}
	for _, r := range w.Running {
		v.Running = append(v.Running, engine.RunningRecord{ID: r.ID, Queue: r.Queue, Type: r.Type, StartedAt: unixMS(r.Started)})
	}
	return v
}

func fromUnixMS(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Workers returns the live workers, those whose heartbeat record has not expired, sorted by
// name. Two round trips whatever their number: the index (keys.Workers) and, pipelined, each
// record with its TTL. Index members whose record expired are removed as they are found. A
// worker with DisableHeartbeat, or of a version before heartbeats, is not listed: the list
// says who is alive and beating, not that nobody else reads.
func (i *Inspector) Workers(ctx context.Context) ([]WorkerInfo, error) {
	beats, err := i.store.Beats(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]WorkerInfo, 0, len(beats))
	for _, b := range beats {
		var w WorkerInfo
		if err := json.Unmarshal([]byte(b.Record), &w); err != nil {
			continue // not a record this version can read: leave it to expire
		}
		if b.Left > 0 {
			w.HeartbeatAge = max(heartbeatBeats*w.HeartbeatInterval-b.Left, 0)
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// QueueReaders returns the live workers (Workers) that read queue, sorted by name: what
// DeleteQueue's callers warn about (the CLI's `queues delete`, the API's DELETE).
func (i *Inspector) QueueReaders(ctx context.Context, queue string) ([]WorkerInfo, error) {
	all, err := i.Workers(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(w WorkerInfo) bool { return !slices.Contains(w.Queues, queue) }), nil
}

// heartbeat is the session's heartbeat service (engine.Heartbeat), writing w's record.
func (w *Worker) heartbeat() *engine.Heartbeat {
	return &engine.Heartbeat{Store: w.store, Worker: w.cfg.Name, Interval: w.cfg.HeartbeatInterval, Now: w.cfg.Now, Log: w.log,
		Record: func(now time.Time) ([]byte, error) { return json.Marshal(w.info(now).wire()) },
		Queues: w.cfg.Queues, Types: w.types}
}

// info is the worker's heartbeat record as of now.
func (w *Worker) info(now time.Time) WorkerInfo {
	host, _ := os.Hostname()
	jobs, more := w.cancels.Snapshot(maxHeartbeatRunning)
	running := make([]RunningJob, len(jobs))
	for k, j := range jobs {
		running[k] = RunningJob(j)
	}
	return WorkerInfo{Name: w.cfg.Name, Host: host, PID: os.Getpid(), Version: engine.Version(), Queues: w.cfg.Queues,
		Types: w.types, Concurrency: w.cfg.Concurrency, Running: running, RunningMore: more, Started: w.startedAt,
		LastHeartbeat: now, HeartbeatInterval: w.cfg.HeartbeatInterval}
}
