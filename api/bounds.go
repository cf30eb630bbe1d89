package api

import "time"

// The library's bounds that the handlers check while they decode a body or a query, so that a
// request past one is refused before it is read whole, with the field named. The pipeline
// package documents each value and keeps the constant to itself; these copies must agree.
const (
	maxLimitInterval        = 7 * 24 * time.Hour // pipeline.Limit.Interval
	maxPageLimit            = 1000               // pipeline.Page.Limit, Inspector.SchedulesPage
	maxPayloadBytes         = 1 << 20            // pipeline.ClientConfig.MaxPayloadBytes's default, Periodic.Payload
	maxWorkflowList         = 1000               // pipeline.Inspector.Workflows
	maxWorkflowTasks        = 5000               // pipeline.Workflow
	maxWorkflowDependencies = 10_000             // pipeline.Workflow
	historySpanFine         = time.Hour          // pipeline.Inspector.History, 5 s buckets
	historySpanCoarse       = 24 * time.Hour     // pipeline.Inspector.History, 1 min buckets
)

// batchCallback is the library's name of a batch's callback task (pipeline.Batch).
const batchCallback = "callback"
