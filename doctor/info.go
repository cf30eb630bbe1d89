package doctor

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Info is what the operator's Redis page shows: each server's settings and state, and what
// each queue takes of its memory.
type Info struct {
	// Nodes has one entry per server (each master of a cluster), in address order.
	Nodes []Node `json:"nodes"`
	// Queues has the memory of each known queue, by name.
	Queues []QueueMemory `json:"queues"`
	// MemoryError says why the queues' memory was not measured. A server may not support
	// MEMORY USAGE (an embedded or compatible Redis), or refuse it (an ACL). Each queue then
	// has its Jobs and Unmeasured set.
	MemoryError string `json:"memory_error,omitempty"`
}

// Node is one server's state, from INFO (server, memory, clients, persistence) and CONFIG GET
// appendfsync. A least-privilege ACL user may be refused either: Error then says so and the
// fields it would have filled stay empty.
type Node struct {
	// Node is the server's address ("" for a client of another kind, such as a Ring).
	Node    string `json:"node"`
	Version string `json:"version"`
	// Mode is redis_mode: standalone, cluster or sentinel.
	Mode          string `json:"mode"`
	UptimeSeconds int64  `json:"uptime_seconds"`
	// UsedMemory and MaxMemory are in bytes; MaxMemory 0 is no limit.
	UsedMemory int64 `json:"used_memory"`
	MaxMemory  int64 `json:"max_memory"`
	// EvictionPolicy is maxmemory-policy: anything but noeviction deletes jobs when full.
	EvictionPolicy   string `json:"eviction_policy"`
	ConnectedClients int64  `json:"connected_clients"`
	MaxClients       int64  `json:"max_clients"`
	// AOF is whether the append-only file is on. AppendFsync is its fsync policy: always,
	// everysec, no, or "" when CONFIG was refused.
	AOF         bool   `json:"aof"`
	AppendFsync string `json:"appendfsync,omitempty"`
	// RDBLastSaveStatus is the last snapshot's outcome (ok or err), RDBLastSave its time in
	// unix seconds. RDBChangesSinceSave counts the writes a crash now would lose without AOF.
	RDBLastSaveStatus   string `json:"rdb_last_save_status"`
	RDBLastSave         int64  `json:"rdb_last_save"`
	RDBChangesSinceSave int64  `json:"rdb_changes_since_save"`
	// Error says what Redis refused (INFO or CONFIG), when it did, or what it does not support.
	Error string `json:"error,omitempty"`
	// Unsupported names what the server does not support or report ("INFO server", "INFO
	// memory", "INFO persistence", "CONFIG GET"): the fields those fill stay empty. An embedded
	// Redis (the demo's) and some compatible servers lack them; a refusal by an ACL is Error.
	Unsupported []string `json:"unsupported,omitempty"`
}

// QueueMemory is what one queue takes of Redis's memory, in bytes, as MEMORY USAGE reports it.
type QueueMemory struct {
	Queue string `json:"queue"`
	// Bytes is the sum of Keys and Records.
	Bytes int64 `json:"bytes"`
	// Keys is the memory of the queue's structures: its streams (every priority level and
	// partition; they hold queued jobs' payloads), scheduled and dead sets and stats.
	Keys int64 `json:"keys"`
	// Records estimates the job records of the scheduled, queued, running and dead jobs: their
	// number (Jobs) times the mean size of the records sampled. Sampled holds at most 5 a
	// partition, from its dead and scheduled sets. Finished records kept for their retention
	// are in no index and not counted.
	Records int64 `json:"records"`
	Jobs    int64 `json:"jobs"`
	Sampled int   `json:"sampled"`
	// Unmeasured is set when the server did not measure memory (Info.MemoryError says why):
	// Bytes, Keys and Records are 0 and only Jobs is known.
	Unmeasured bool `json:"unmeasured,omitempty"`
}

// memorySamples is MEMORY USAGE's SAMPLES: how many elements of a stream, set or hash Redis
// looks at to estimate the whole (its own default). A large queue so costs what a small one does.
const memorySamples = 5

// recordSamples bounds the job records measured per partition for the records estimate.
const recordSamples = 5

// Info reads each server's state (INFO and CONFIG GET appendfsync, per master of a cluster)
// and what each known queue takes of memory. The memory is measured with MEMORY USAGE SAMPLES
// 5 on a bounded set of keys per queue, in one pipeline. Those are a key per stream level, the
// scheduled and dead sets, the stats hash, and at most 5 job records a partition. Redis
// estimates a big stream or set from 5 of its elements. So a queue of millions of jobs costs
// what an empty one does, and nothing blocks Redis.
//
// The error is a failed pipeline's (Redis unreachable, or refusing MEMORY). What a server
// refuses of INFO and CONFIG is in its node's Error.
func (d *Doctor) Info(ctx context.Context) (*Info, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := d.store.Ping(ctx); err != nil {
		return nil, rediserr.Wrap("redis info", err)
	}
	out := &Info{Nodes: []Node{}, Queues: []QueueMemory{}}
	var mu sync.Mutex
	err := d.store.EachServer(ctx, func(ctx context.Context, srv jobstate.Server) error {
		n := readNode(ctx, srv)
		mu.Lock()
		out.Nodes = append(out.Nodes, n)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, rediserr.Wrap("redis info", err)
	}
	slices.SortFunc(out.Nodes, func(x, y Node) int { return cmp.Compare(x.Node, y.Node) })
	names, err := d.insp.QueueNames(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		qm, err := d.queueMemory(ctx, name, out.MemoryError == "")
		if err != nil && out.MemoryError == "" && (unsupported(err) || rediserr.IsNoPerm(err)) {
			// The jobs are counted all the same; the page says why there are no bytes.
			out.MemoryError = notRead("MEMORY USAGE", err) + ": the queues' memory is not measured"
			qm, err = d.queueMemory(ctx, name, false)
		}
		if err != nil {
			return nil, err
		}
		out.Queues = append(out.Queues, qm)
	}
	return out, nil
}

// notRead says why cmd gave nothing: the server does not support it, or refused it.
func notRead(cmd string, err error) string {
	if unsupported(err) {
		return fmt.Sprintf("this server does not support %s (%s)", cmd, jobstate.ReplyText(err))
	}
	return fmt.Sprintf("Redis refused %s (%s)", cmd, jobstate.ReplyText(err))
}

// infoSections are the sections of INFO that Node and the checks read, each with a field that
// tells whether the server reported it.
var infoSections = []struct{ section, field string }{
	{"server", "redis_version"}, {"memory", "used_memory"}, {"persistence", "aof_enabled"},
}

// readNode reads one server's state; what Redis refuses goes into Error.
func readNode(ctx context.Context, srv jobstate.Server) Node {
	n := Node{Node: srv.Addr}
	info, err := readInfo(ctx, srv, "server", "memory", "clients", "persistence")
	if err != nil {
		if unsupported(err) {
			n.Unsupported = append(n.Unsupported, "INFO")
		}
		n.Error = notRead("INFO", err)
		return n
	}
	fillNode(&n, info)
	fsync, err := srv.ConfigGet(ctx, "appendfsync")
	switch {
	case err != nil && unsupported(err):
		n.Unsupported = append(n.Unsupported, "CONFIG GET")
	case err != nil:
		n.Error = "CONFIG GET refused: " + jobstate.ReplyText(err)
	default:
		n.AppendFsync = fsync
	}
	return n
}

// fillNode sets n's fields from INFO's, and names the sections the server left out.
func fillNode(n *Node, info map[string]string) {
	for _, s := range infoSections {
		if _, ok := info[s.field]; !ok {
			n.Unsupported = append(n.Unsupported, "INFO "+s.section)
		}
	}
	num := func(k string) int64 { v, _ := strconv.ParseInt(info[k], 10, 64); return v }
	n.Version, n.Mode = info["redis_version"], info["redis_mode"]
	n.UptimeSeconds = num("uptime_in_seconds")
	n.UsedMemory, n.MaxMemory = num("used_memory"), num("maxmemory")
	n.EvictionPolicy = info["maxmemory_policy"]
	n.ConnectedClients, n.MaxClients = num("connected_clients"), num("maxclients")
	n.AOF = info["aof_enabled"] == "1"
	n.RDBLastSaveStatus = info["rdb_last_bgsave_status"]
	n.RDBLastSave, n.RDBChangesSinceSave = num("rdb_last_save_time"), num("rdb_changes_since_last_save")
}

// queueMemory measures one queue (QueueMemory), in two pipelines: the sizes of its keys, its
// gauges and a few record ids, then the sampled records' sizes. Without measure it counts the
// jobs alone (Unmeasured): the server does not measure memory.
func (d *Doctor) queueMemory(ctx context.Context, queue string, measure bool) (QueueMemory, error) {
	qm := QueueMemory{Queue: queue}
	p, err := jobstate.PartitionCount(ctx, d.store.Client(), d.store.Prefix(), queue)
	if err != nil {
		return qm, err
	}
	qs := make([]keys.Queue, max(1, p))
	for k := range qs {
		qs[k] = keys.New(d.store.Prefix(), keys.PartitionName(queue, k, p))
	}
	levels, err := jobstate.QueueLevels(ctx, d.store.Client(), qs)
	if err != nil {
		return qm, err
	}
	st, err := d.insp.Stats(ctx, queue)
	if err != nil {
		return qm, err
	}
	qm.Jobs = st.Scheduled + st.Queued + st.InProgress + st.Dead
	if !measure {
		qm.Unmeasured = true
		return qm, nil
	}
	m, err := d.store.QueueMemory(ctx, jobstate.MemoryParams{Queues: qs, Levels: levels,
		Samples: memorySamples, Records: recordSamples})
	if err != nil {
		return qm, err
	}
	qm.Keys, qm.Sampled = m.Keys, m.Sampled
	if qm.Sampled > 0 {
		qm.Records = m.RecordBytes / int64(qm.Sampled) * qm.Jobs
	}
	qm.Bytes = qm.Keys + qm.Records
	return qm, nil
}

// NodeMemory is one server's memory settings, as INFO memory reports them.
type NodeMemory struct {
	Node      string // the server's address
	Policy    string // maxmemory-policy
	MaxMemory string // maxmemory, human-readable (0B: no limit)
	Used      string // used memory, human-readable
	// Fix is what to do when Evicts: the eviction check's fix.
	Fix string
}

// Evicts reports whether the server deletes keys when full: a deleted job hash or stream is
// a lost job.
func (m NodeMemory) Evicts() bool { return m.Policy != "" && m.Policy != "noeviction" }

// Memory reads each server's memory settings (each master of a cluster), in address order.
// They are what a worker warns about at start, and what a refusal for lack of memory quotes.
// It is one INFO memory per server, which a least-privilege ACL may refuse.
func (d *Doctor) Memory(ctx context.Context) ([]NodeMemory, error) {
	var (
		mu  sync.Mutex
		out []NodeMemory
	)
	err := d.store.EachServer(ctx, func(ctx context.Context, srv jobstate.Server) error {
		info, err := srv.Info(ctx, "memory")
		if err != nil {
			return err
		}
		m := NodeMemory{Node: srv.Addr, Policy: info["maxmemory_policy"], MaxMemory: info["maxmemory_human"], Used: info["used_memory_human"]}
		if m.Evicts() {
			m.Fix = evictionFix
		}
		mu.Lock()
		out = append(out, m)
		mu.Unlock()
		return nil
	})
	slices.SortFunc(out, func(x, y NodeMemory) int { return cmp.Compare(x.Node, y.Node) })
	return out, err
}
