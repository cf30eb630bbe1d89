package cli

import "time"

// The library's defaults and bounds that the commands show in their help or check before they
// connect, so that a bad argument is a usage error (exit 2) worded for a flag. The pipeline
// package documents each value and keeps the constant to itself; these copies must agree.
const (
	defaultBackoffBase         = time.Second        // pipeline.Backoff.Base
	defaultBackoffMax          = 10 * time.Minute   // pipeline.Backoff.Max
	defaultPageLimit           = 100                // pipeline.Page.Limit
	defaultPauseConfirmTimeout = 5 * time.Second    // pipeline.Inspector.Pause
	defaultMaxQueues           = 2000               // pipeline.InspectorConfig.MaxQueues
	defaultMaxSchedules        = 100_000            // pipeline.InspectorConfig.MaxSchedules
	maxReplicas                = 100                // pipeline.WithReplicas
	maxPartitions              = 1024               // pipeline.QueueOptions.Partitions
	maxLimitRate               = 1_000_000_000      // pipeline.Limit.Rate
	maxLimitInterval           = 7 * 24 * time.Hour // pipeline.Limit.Interval
	maxPageLimit               = 1000               // pipeline.Page.Limit, Inspector.SchedulesPage
	maxPayloadBytes            = 1 << 20            // pipeline.ClientConfig.MaxPayloadBytes's default
	maxWorkflowList            = 1000               // pipeline.Inspector.Workflows
	historySpanFine            = time.Hour          // pipeline.Inspector.History, 5 s buckets
	historySpanCoarse          = 24 * time.Hour     // pipeline.Inspector.History, 1 min buckets

	defaultMaxRetries        = 5                      // pipeline.ClientConfig.MaxRetries
	defaultReplicaTimeout    = time.Second            // pipeline.ClientConfig.ReplicaTimeout
	defaultConcurrency       = 10                     // pipeline.WorkerConfig.Concurrency
	defaultVisibilityTimeout = 30 * time.Second       // pipeline.WorkerConfig.VisibilityTimeout
	minVisibilityTimeout     = 300 * time.Millisecond // pipeline.WorkerConfig.VisibilityTimeout
	defaultRecoveryInterval  = 5 * time.Second        // pipeline.WorkerConfig.RecoveryInterval
	defaultShutdownTimeout   = 30 * time.Second       // pipeline.WorkerConfig.ShutdownTimeout
	defaultRetention         = 24 * time.Hour         // pipeline.WorkerConfig.Retention
	defaultHeartbeatInterval = 5 * time.Second        // pipeline.WorkerConfig.HeartbeatInterval
)
