package workflow

import "github.com/conveyorq/conveyor/status"

// JSON is the wire form of a workflow (pipeline.WorkflowState's JSON): the CLI's `workflows
// get --json` and the HTTP API's. Times are unix milliseconds, 0 when not yet.
type JSON struct {
	ID         string `json:"id"`
	Queue      string `json:"queue"`
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Status     string `json:"status"`
	CreatedAt  int64  `json:"created_at"`
	FinishedAt int64  `json:"finished_at"`
	Total      int    `json:"total"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Canceled   int    `json:"canceled"`
	Purged     int    `json:"purged"`
	Duplicate  bool   `json:"duplicate,omitempty"`
	// Tasks is absent from a listing's summaries (Inspector.Workflows).
	Tasks []TaskJSON `json:"tasks,omitempty"`
}

// TaskJSON is the wire form of a workflow's task.
type TaskJSON struct {
	Name       string        `json:"name"`
	JobID      string        `json:"job_id"`
	Type       string        `json:"type"`
	After      []string      `json:"after"`
	Finally    bool          `json:"finally"`
	Status     status.Status `json:"status"`
	Attempt    int           `json:"attempt"`
	LastError  string        `json:"last_error"`
	StartedAt  int64         `json:"started_at"`
	FinishedAt int64         `json:"finished_at"`
}
