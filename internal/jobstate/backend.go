package jobstate

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// Backend is what pipeline runs on: every job-state call of a Store. It is declared here,
// beside Store, not in pipeline. pipeline's Client, Worker and Inspector share nearly all of it.
// The conformance suite (jobstate/storetest) is written against it, as river's riverdrivertest
// is against riverdriver. And a test double, such as a store that fails on demand, wraps a
// Backend from any package. Packages that make a few calls (delayed, recovery) declare their
// own narrow interface where they use it; a Backend satisfies those.
//
// The limits', levels' and partition counts' own reads are not in it yet: they stay free
// functions beside the settings record (settings.go), which is.
type Backend interface {
	// The store itself (store.go).
	Via(w redis.UniversalClient) Backend
	Client() redis.UniversalClient
	Prefix() string
	Cluster() bool
	Events(ctx context.Context) events.Mode

	// Batches and the worker's outcomes (batch.go).
	Batch() *Batch
	Finish(ctx context.Context, p FinishParams) []Finished

	// Creating and reading jobs (jobstate.go).
	Enqueue1(ctx context.Context, q keys.Queue, now time.Time, j *NewJob) (Created, error)
	Enqueue1Bounded(ctx context.Context, q keys.Queue, now time.Time, j *NewJob, maxWaiting int) (Created, error)
	Get(ctx context.Context, q keys.Queue, id string) (flat []string, found bool, err error)
	GetWatched(ctx context.Context, q keys.Queue, id string) (flat []string, found bool, err error)

	// Transitions outside a worker's batch (transitions.go).
	Release(ctx context.Context, q keys.Queue, p ReleaseParams) (Released, error)
	Cancel(ctx context.Context, q keys.Queue, p CancelParams) (Row, error)
	RunNow(ctx context.Context, q keys.Queue, p RunNowParams) (Row, error)
	Replay(ctx context.Context, q keys.Queue, id string, now time.Time) (Row, error)
	Purge(ctx context.Context, q keys.Queue, p PurgeParams) (int, error)
	PurgeDryRun(ctx context.Context, q keys.Queue, p PurgeDryRunParams) ([]string, error)
	Adopt(ctx context.Context, q keys.Queue, p AdoptParams) (Adopted, error)

	// Limits' admission and leases (admit.go).
	Admit(ctx context.Context, p AdmitParams) (AdmitResult, error)
	Leases(ctx context.Context, p LeasesParams) (lost bool, waiting []string, err error)

	// The services' scripts (maintain.go).
	Promote(ctx context.Context, q keys.Queue, pp PromoteParams) (Promoted, error)
	Recover(ctx context.Context, q keys.Queue, p RecoverParams) (Recovered, error)
	Prune(ctx context.Context, q keys.Queue, p PruneParams) (int, error)
	Clock(ctx context.Context, q keys.Queue) (time.Time, error)

	// Progress (progress.go).
	WriteProgress(ctx context.Context, q keys.Queue, p ProgressParams) (Row, error)

	// Attempts' log lines (logs.go).
	Logs(ctx context.Context, q keys.Queue, id string) ([]AttemptLogs, error)

	// Workflows (workflow.go).
	FollowCascade(ctx context.Context, q keys.Queue, p CascadeParams) (CascadeResult, error)
	PublishWorkflow(ctx context.Context, q keys.Queue, now time.Time, wf *NewWorkflow) (existed bool, entries []string, err error)
	ReadWorkflow(ctx context.Context, q keys.Queue, id string) (rec *WorkflowRecord, rows []TaskRow, found bool, err error)
	ReadTaskDeps(ctx context.Context, q keys.Queue, id string) (TaskDeps, error)
	TaskResults(ctx context.Context, wfKey string, names []string) (map[string][]byte, error)
	ListWorkflows(ctx context.Context, q keys.Queue, n int) ([]WorkflowSummary, error)

	// Reads (read.go).
	FindFirst(ctx context.Context, lookups []Lookup) (int, Record, error)
	Records(ctx context.Context, q keys.Queue, ids []string) ([]*Record, error)
	RecordSizes(ctx context.Context, q keys.Queue, ids []string) ([]int64, error)
	Locate(ctx context.Context, qs []keys.Queue, ids []string) ([]int, error)
	ScheduledPage(ctx context.Context, q keys.Queue, after *SetItem, n int) ([]SetItem, error)
	WaitListPage(ctx context.Context, set, prefix, from string, skip, n int) ([]WaitItem, error)
	HasWaitLists(ctx context.Context, set string) (bool, error)
	DeadPage(ctx context.Context, q keys.Queue, oldest bool, after *SetItem, n int) ([]SetItem, error)
	CompletedPage(ctx context.Context, q keys.Queue, after *SetItem, n int) ([]SetItem, error)
	CanceledPage(ctx context.Context, q keys.Queue, after *SetItem, n int) ([]SetItem, error)
	IndexPage(ctx context.Context, key string, after *SetItem, n int) ([]SetItem, error)
	LastDead(ctx context.Context, q keys.Queue) (last SetItem, ok bool, err error)
	StreamPage(ctx context.Context, q keys.Queue, start string, n int) ([]Entry, *Group, error)
	StreamRange(ctx context.Context, q keys.Queue, start string, n int) ([]Entry, error)
	EntryRecords(ctx context.Context, q keys.Queue, es []Entry, pending bool) ([]*Record, map[string]bool, error)
	PendingPage(ctx context.Context, q keys.Queue, start string, n int) ([]Lease, error)
	IdlePage(ctx context.Context, p IdlePageParams) ([]Lease, error)
	Status(ctx context.Context, q keys.Queue, id string) (string, error)
	Consumers(ctx context.Context, q keys.Queue) ([]Consumer, error)

	// Administration (admin.go).
	SetPage(ctx context.Context, key string, desc bool, after *SetItem, n int) ([]SetItem, error)
	EntryJobs(ctx context.Context, q keys.Queue, entries []string) ([]EntryJob, error)

	// The queue registry and stats (queues.go).
	ReadStats(ctx context.Context, qs []keys.Queue) ([]*Stats, error)
	KnownQueues(ctx context.Context) ([]string, map[string]int, error)
	IsKnownQueue(ctx context.Context, queue string) (bool, error)
	ForgetQueue(ctx context.Context, queue string) error
	ScanKeys(ctx context.Context, start string, unlink, everywhere bool) (int, error)
	AddQueue(ctx context.Context, p AddQueueParams) (Added, error)
	PartitionCounts(ctx context.Context, queues []string) ([]int, error)
	ScanState(ctx context.Context, q keys.Queue) (levels []int, cascades bool, err error)

	// Groups (groups.go).
	ReadGroups(ctx context.Context, qs []keys.Queue, most int) ([]GroupCount, int, error)

	// Workers' heartbeats (beats.go).
	WriteBeat(ctx context.Context, p BeatParams) error
	EndBeat(ctx context.Context, name string) error
	Beats(ctx context.Context) ([]Beat, error)
	Sightings(ctx context.Context, window time.Duration) (Sightings, error)

	// The queues' history (history.go).
	AddHistory(ctx context.Context, bs []HistoryBucket) error
	ReadHistory(ctx context.Context, ks []string) ([]map[string]string, error)

	// The queues' settings records (settings.go).
	UpdateSettings(ctx context.Context, queue string, c SettingsChange) (SettingsChanged, error)
	BumpSettings(ctx context.Context, queue string) error
	ReadSettings(ctx context.Context, queues []string) ([]Settings, error)
	SubscribeSettings(ctx context.Context) (*redis.PubSub, error)
	SubscribePauseAcks(ctx context.Context) (*redis.PubSub, error)
	ReadRoute(ctx context.Context, queue string) (int, Settings, error)
	DeleteSettings(ctx context.Context, queue string) error

	// Changes of the settings kept beside the jobs (queue_change.go).
	LockLayout(ctx context.Context, queue string) (unlock func(), err error)
	HoldLayout(ctx context.Context, queue string) (unlock func(), err error)
	SetPartitions(ctx context.Context, c LayoutChange) error
	PutLimit(ctx context.Context, p PutLimitParams) error
	DropLimit(ctx context.Context, queue, typ string, perKey bool, now time.Time) (bool, error)
	PutGroups(ctx context.Context, p PutGroupsParams) error
	ReadQueueState(ctx context.Context, queue string) (QueueState, error)

	// Key rotation (rotate.go).
	Reseal(ctx context.Context, q keys.Queue, items []ResealItem) ([]script.Code, error)
	ReadStored(ctx context.Context, q keys.Queue, ids []string) ([]StoredJob, error)
	ReadSpan(ctx context.Context, stream string) (StreamSpan, error)
	ReadEntries(ctx context.Context, stream, after, last string, n int) ([]StoredEntry, error)
	ReadTaskResults(ctx context.Context, q keys.Queue, wfIDs []string) ([]StoredTaskResult, error)

	// Memory (memory.go).
	QueueMemory(ctx context.Context, p MemoryParams) (Memory, error)
}

var _ Backend = (*Store)(nil)
