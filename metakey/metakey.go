// Package metakey names the Watermill metadata keys that mean something to Conveyor. Control
// keys set the options of the job a message becomes. Schedule keys mark the jobs of periodic
// schedules. EntryType is what a worker adds to the messages it hands to Watermill middleware.
// The package holds names only, so a producer can use them without importing package pipeline.
//
// # Control keys
//
// pipeline.Publisher reads the control keys and removes them from the job's metadata. A Worker
// reads them too, on a message of another Watermill publisher that it adopts. There a delay
// counts from the message's stream entry, and the metadata stays as published. A unique key
// held by another job drops the message as a duplicate. A bad value sends the message to the
// dead set, with a reason that names the key.
//
// Every key that starts with Prefix is reserved. An unknown one (say "conveyor_delays") is
// refused, so that a typo never drops an option silently. The options are package pipeline's.
//
//	Option          Key                         Value
//	Task.Type       conveyor_type               the job type, 1 to 128 bytes, no spaces.
//	WithDelay       conveyor_delay              a Go duration, at least 0 ("90s", "1h30m").
//	WithRunAt       conveyor_run_at             unix milliseconds, or RFC 3339.
//	WithMaxRetries  conveyor_max_retries        an integer, 0 to 1000.
//	WithTimeout     conveyor_timeout            a Go duration, at least 0 (0: no timeout).
//	WithUnique      conveyor_unique_key         1 to 128 bytes.
//	WithUnique      conveyor_unique_ttl         a Go duration above 0; needs conveyor_unique_key.
//	WithPriority    conveyor_priority           an integer, 1 (first) to 4.
//	WithGroup       conveyor_group              a group name, as a job id (1 to 128 bytes).
//	WithLimitKey    conveyor_limit_key          1 to 128 bytes.
//	WithRetention   conveyor_retention          a Go duration, at least 0 (0: delete at the end).
//	WithDebounce    conveyor_debounce_key       1 to 128 bytes; needs the two below.
//	WithDebounce    conveyor_debounce_quiet     a Go duration above 0.
//	WithDebounce    conveyor_debounce_max_wait  a Go duration, at least the quiet.
//
// conveyor_delay and conveyor_run_at exclude each other. A run-at time in the past runs the
// job at once. The three debounce keys go together. They exclude conveyor_delay,
// conveyor_run_at, conveyor_unique_key and conveyor_group, as WithDebounce excludes those
// options. A debounced message's job has its window's id, not the message's UUID.
//
// Priority, group, limit key, retention and debounce are for the Publisher only. An adopted
// message's entry is already in its stream, and adopting it writes none of them. So a Worker
// sends a message of another publisher that carries one to the dead set, naming the key.
package metakey

// Control keys.
const (
	// Prefix starts every control key. Metadata keys with it are reserved.
	Prefix = "conveyor_"
	// Type is the job type. Without it, pipeline.PublisherConfig.DefaultType applies.
	Type = "conveyor_type"
	// Delay makes the job due that long after it is published (a Go duration).
	Delay = "conveyor_delay"
	// RunAt makes the job due at a time: unix milliseconds, or RFC 3339.
	RunAt = "conveyor_run_at"
	// MaxRetries is the job's retry count (a decimal integer).
	MaxRetries = "conveyor_max_retries"
	// Timeout bounds each attempt of the job (a Go duration).
	Timeout = "conveyor_timeout"
	// UniqueKey de-duplicates the job, as WithUnique.
	UniqueKey = "conveyor_unique_key"
	// UniqueTTL is how long UniqueKey is held (a Go duration). It defaults to
	// pipeline.PublisherConfig.UniqueTTL.
	UniqueTTL = "conveyor_unique_ttl"
	// Priority is the job's priority level, as WithPriority (a decimal integer).
	Priority = "conveyor_priority"
	// Group puts the job in a fair group of its queue, as WithGroup.
	Group = "conveyor_group"
	// LimitKey is the key the queue's per-key limits count the job under, as WithLimitKey.
	LimitKey = "conveyor_limit_key"
	// Retention is how long the job's record is kept after it ends, as WithRetention (a Go
	// duration).
	Retention = "conveyor_retention"
	// DebounceKey debounces the job, as WithDebounce. It needs DebounceQuiet and
	// DebounceMaxWait.
	DebounceKey = "conveyor_debounce_key"
	// DebounceQuiet is WithDebounce's quiet (a Go duration).
	DebounceQuiet = "conveyor_debounce_quiet"
	// DebounceMaxWait is WithDebounce's maximum wait (a Go duration).
	DebounceMaxWait = "conveyor_debounce_max_wait"
)

// Metadata of the jobs of periodic schedules (pipeline.Periodic). The scheduler sets them; they
// are a job's own metadata, which its handler reads.
const (
	// Schedule is the schedule's name.
	Schedule = "schedule"
	// ScheduleTick is the tick the job stands for, in RFC 3339.
	ScheduleTick = "schedule_tick"
	// ScheduleMissed is "true" on the one job that stands for missed ticks
	// (pipeline.MissedRunOnce).
	ScheduleMissed = "schedule_missed"
)

// EntryType holds the job's type on each message a Worker reads from a stream. Watermill
// middleware can read it. It is not Type: Type is a producer's request, which the Publisher
// removes. EntryType is the type the job has, from its stream entry, set by the worker. Like
// every key starting with '_', it is reserved: a job's own metadata cannot carry it.
const EntryType = "_conveyor_type"
