package engine

import (
	"cmp"
	"runtime/debug"
	"sync"
)

// Record is a worker's heartbeat record, pipeline.WorkerInfo's wire form, in the record in
// Redis and in the CLI's and the API's JSON: times as unix milliseconds, as a Job's. pipeline
// converts WorkerInfo to it and back.
type Record struct {
	Name              string          `json:"name"`
	Host              string          `json:"host"`
	PID               int             `json:"pid"`
	Version           string          `json:"version"`
	Queues            []string        `json:"queues"`
	Types             []string        `json:"types"`
	Concurrency       int             `json:"concurrency"`
	Running           []RunningRecord `json:"running"`
	RunningMore       int             `json:"running_more"`
	StartedAt         int64           `json:"started_at"`
	HeartbeatAt       int64           `json:"heartbeat_at"`
	HeartbeatAgeMS    int64           `json:"heartbeat_age_ms"`
	HeartbeatInterval int64           `json:"heartbeat_interval_ms"`
}

// RunningRecord is a running job in a heartbeat record (pipeline.RunningJob's wire form).
type RunningRecord struct {
	ID        string `json:"id"`
	Queue     string `json:"queue"`
	Type      string `json:"type"`
	StartedAt int64  `json:"started_at"`
}

// modulePath is the library's module path, looked for in the binary's build information.
const modulePath = "github.com/conveyorq/conveyor"

// Version is the version of the Conveyor module in the running binary, as the Go toolchain
// recorded it (pipeline.WorkerInfo.Version). When the binary is Conveyor's own it is the main
// module's: a tag, or a pseudo-version of the commit ("(devel)" for 'go run' and tests). Else
// it is the dependency's. A binary without build information reports "(unknown)". Workers
// write it in their heartbeat.
var Version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	if bi.Main.Path == modulePath {
		return cmp.Or(bi.Main.Version, "(devel)")
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return cmp.Or(d.Version, "(devel)")
		}
	}
	return "(devel)"
})
