package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/pipeline"
)

// minRedisVersion is the oldest Redis Conveyor runs on (docs/OPERATIONS.md "Redis"). Scripts
// replicate their effects, XCLAIM drops deleted entries and ACL DRYRUN exists from 7.0.
var minRedisVersion = [3]int{7, 0, 0}

// Thresholds of the findings.
const (
	timeout         = 10 * time.Second
	memoryWarnShare = 0.8                    // used memory over this share of maxmemory is a warning
	skewWarn        = 500 * time.Millisecond // clock skew a delayed job's due time would carry
	skewFail        = 30 * time.Second
)

// The statuses of a Finding.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Finding is the verdict of one check of Doctor.Check.
type Finding struct {
	// Check is what was checked: version, eviction, memory, persistence, cluster, acl or clock.
	Check string `json:"check"`
	// Node is the server's address when the check is per node on a cluster; "" otherwise.
	Node string `json:"node,omitempty"`
	// Status is OK, Warn or Fail.
	Status string `json:"status"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says in one line what to do, for a warning or a failure.
	Fix string `json:"fix,omitempty"`
}

// Report is what Doctor.Check found.
type Report struct {
	// Findings has one finding per check, in the order version, eviction, memory, persistence,
	// cluster, clock, acl. The checks of one server come once per master of a cluster.
	Findings []Finding `json:"findings"`
	// Failed counts the findings whose status is Fail.
	Failed int `json:"failed"`
}

// Config configures a Doctor.
type Config struct {
	// Prefix is the deployment's key prefix: the ACL check asks for its keys and channels, and
	// Info measures its queues. Defaults to pipeline.DefaultPrefix.
	Prefix string
}

// Doctor checks a deployment's Redis and reads its state. Its methods are safe for concurrent
// use.
type Doctor struct {
	store *jobstate.Store
	insp  *pipeline.Inspector
}

// New returns a Doctor over rdb (a standalone, cluster or failover client): the client and
// prefix of the deployment's pipeline.Client. It returns an error for a nil client or an
// unusable prefix.
func New(rdb redis.UniversalClient, cfg Config) (*Doctor, error) {
	if rdb == nil {
		return nil, errors.New("doctor: New with a nil Redis client")
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, pipeline.DefaultPrefix)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: cfg.Prefix})
	if err != nil {
		return nil, err
	}
	return &Doctor{store: jobstate.NewStore(rdb, cfg.Prefix), insp: insp}, nil
}

// Check checks that the Redis behind the Doctor (each master of a cluster) is set up to keep
// jobs safe. It checks the version, eviction policy, memory against maxmemory, persistence and
// cluster mode. It checks the commands a worker needs under the connection's ACL user, and
// clock skew. A check Redis does not allow the user is a warning that says so: INFO or CONFIG
// under a least-privilege ACL, say. It takes at most 10 seconds.
//
// The error is a failed PING's: Redis unreachable or refusing the connection. A failed check is
// a finding, not an error.
func (d *Doctor) Check(ctx context.Context) (Report, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store, wantCluster := d.store, false
	if err := store.Ping(ctx); err != nil {
		// A cluster client on a standalone server fails every command (its CLUSTER SLOTS is
		// refused). So check the seed server itself. Its cluster finding then says to drop
		// --cluster, rather than answer with Redis's "cluster support disabled".
		seed, closeSeed := store.StandaloneSeed(ctx)
		if seed == nil {
			return Report{}, rediserr.Wrap("doctor", err)
		}
		defer func() { _ = closeSeed() }()
		store, wantCluster = seed, true
	}
	r := Report{Findings: diagnose(ctx, store, wantCluster)}
	for _, f := range r.Findings {
		if f.Status == Fail {
			r.Failed++
		}
	}
	return r, nil
}

// diagnose runs every check. Per-node checks run on each master of a cluster. The wantCluster
// flag says the user asked for a cluster (--cluster) though the store's client is a plain one.
// That is a cluster client given a standalone server (see Check).
func diagnose(ctx context.Context, store *jobstate.Store, wantCluster bool) []Finding {
	var (
		mu sync.Mutex
		fs []Finding
	)
	cluster := store.Cluster() || wantCluster
	_ = store.EachServer(ctx, func(ctx context.Context, srv jobstate.Server) error {
		nf := checkNode(ctx, srv, cluster)
		node := srv.Addr
		if !cluster {
			node = ""
		}
		for i := range nf {
			nf[i].Node = node
		}
		mu.Lock()
		fs = append(fs, nf...)
		mu.Unlock()
		return nil
	})
	order := []string{"version", "eviction", "memory", "persistence", "cluster", "clock"}
	slices.SortStableFunc(fs, func(x, y Finding) int {
		if d := slices.Index(order, x.Check) - slices.Index(order, y.Check); d != 0 {
			return d
		}
		return strings.Compare(x.Node, y.Node)
	})
	return append(fs, checkACL(ctx, store))
}

// unsupported reports that Redis answered a command with an error because it does not have
// the command or this form of it. That is an embedded Redis such as miniredis, or an older or
// a compatible server ("unknown command", "syntax error", "wrong number of arguments"). It is
// not an ACL, the credentials or the server's state refusing it.
func unsupported(err error) bool {
	switch rediserr.Classify(err) {
	case rediserr.UnknownCommand, rediserr.Other:
		return true
	}
	return false
}

// refusedBy says that Redis did not let the user run cmd, as a warning. The server may not
// have cmd at all (an embedded or a compatible Redis). Then it says so: an ACL would not help.
func refusedBy(check, cmd string, err error) Finding {
	if unsupported(err) {
		return notSupported(check, cmd, jobstate.ReplyText(err))
	}
	return Finding{Check: check, Status: Warn,
		Detail: fmt.Sprintf("cannot check: Redis refused %s (%s)", cmd, jobstate.ReplyText(err)),
		Fix:    "run 'conveyor doctor' as a user allowed " + cmd + " (an admin), or allow it: ACL SETUSER <user> +" + strings.ToLower(strings.Fields(cmd)[0])}
}

// notSupported is the warning of a check that the server cannot answer. The server does not
// have cmd (or does not report it), as an embedded Redis (the demo's) or some compatible
// servers.
func notSupported(check, cmd, why string) Finding {
	detail := "cannot check: this server does not support " + cmd
	if why != "" {
		detail += " (" + why + ")"
	}
	return Finding{Check: check, Status: Warn, Detail: detail,
		Fix: fmt.Sprintf("an embedded or Redis-compatible server lacks it: run 'conveyor doctor' against the Redis %d.%d or later that production uses",
			minRedisVersion[0], minRedisVersion[1])}
}

// readInfo reads INFO's sections. A server that does not take several sections (before Redis
// 7, an embedded Redis) is asked for its default set, which holds them on a real server.
func readInfo(ctx context.Context, srv jobstate.Server, sections ...string) (map[string]string, error) {
	info, err := srv.Info(ctx, sections...)
	if err != nil && unsupported(err) {
		info, err = srv.Info(ctx)
	}
	return info, err
}

// checkNode runs the checks of one server.
func checkNode(ctx context.Context, srv jobstate.Server, cluster bool) []Finding {
	var fs []Finding
	info, err := readInfo(ctx, srv, "server", "memory", "persistence", "cluster")
	if err != nil {
		fs = append(fs, refusedBy("version", "INFO", err), refusedBy("eviction", "INFO", err),
			refusedBy("memory", "INFO", err), refusedBy("persistence", "INFO", err), refusedBy("cluster", "INFO", err))
		return append(fs, checkClock(ctx, srv))
	}
	// Each check needs its section: a server that leaves one out cannot be checked on it.
	has := func(field string) bool { _, ok := info[field]; return ok }
	for _, chk := range []struct {
		check, section, field string
		run                   func() Finding
	}{
		{"version", "server", "redis_version", func() Finding { return checkVersion(info["redis_version"]) }},
		{"eviction", "memory", "maxmemory_policy", func() Finding { return evictionFinding(info["maxmemory_policy"]) }},
		{"memory", "memory", "used_memory", func() Finding { return checkMemory(info) }},
		{"persistence", "persistence", "aof_enabled", func() Finding { return checkPersistence(ctx, srv, info) }},
		{"cluster", "cluster", "cluster_enabled", func() Finding { return checkCluster(info, cluster) }},
	} {
		if has(chk.field) {
			fs = append(fs, chk.run())
		} else {
			fs = append(fs, notSupported(chk.check, "INFO "+chk.section, ""))
		}
	}
	return append(fs, checkClock(ctx, srv))
}

func checkVersion(v string) Finding {
	f := Finding{Check: "version", Status: OK, Detail: "Redis " + v}
	var got [3]int
	for i, p := range strings.SplitN(v, ".", 3) {
		got[i], _ = strconv.Atoi(p)
	}
	if slices.Compare(got[:], minRedisVersion[:]) < 0 {
		f.Status = Fail
		f.Detail += fmt.Sprintf(": Conveyor needs %d.%d or later", minRedisVersion[0], minRedisVersion[1])
		f.Fix = fmt.Sprintf("upgrade Redis to %d.%d or later", minRedisVersion[0], minRedisVersion[1])
	}
	return f
}

// evictionFix is the one-line fix of a maxmemory-policy other than noeviction.
const evictionFix = "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf (a managed Redis: its parameter group)"

func evictionFinding(policy string) Finding {
	if policy == "noeviction" {
		return Finding{Check: "eviction", Status: OK, Detail: "maxmemory-policy noeviction: a full Redis refuses writes, it deletes nothing"}
	}
	return Finding{Check: "eviction", Status: Fail,
		Detail: fmt.Sprintf("maxmemory-policy %s: when memory is full Redis deletes keys, jobs among them", policy),
		Fix:    evictionFix}
}

func checkMemory(info map[string]string) Finding {
	used, _ := strconv.ParseInt(info["used_memory"], 10, 64)
	limit, _ := strconv.ParseInt(info["maxmemory"], 10, 64)
	f := Finding{Check: "memory", Status: OK}
	if limit == 0 {
		f.Status = Warn
		f.Detail = fmt.Sprintf("used %s, no maxmemory: Redis grows until the host runs out of memory", info["used_memory_human"])
		f.Fix = "set maxmemory to what the host can give Redis (CONFIG SET maxmemory 4gb), with noeviction"
		return f
	}
	share := float64(used) / float64(limit)
	f.Detail = fmt.Sprintf("used %s of maxmemory %s (%.0f%%)", info["used_memory_human"], info["maxmemory_human"], 100*share)
	switch {
	case used >= limit:
		f.Status = Fail
		f.Detail += ": Redis refuses writes, publishes fail"
		f.Fix = "raise maxmemory, purge dead jobs (conveyor dead purge --all) or lower the retention (worker --retention)"
	case share > memoryWarnShare:
		f.Status = Warn
		f.Fix = "raise maxmemory, or lower what is kept (docs/OPERATIONS.md \"Memory in Redis\")"
	}
	return f
}

func checkPersistence(ctx context.Context, srv jobstate.Server, info map[string]string) Finding {
	f := Finding{Check: "persistence"}
	if info["aof_enabled"] == "1" {
		f.Status, f.Detail = OK, "appendonly yes"
		if fsync, err := srv.ConfigGet(ctx, "appendfsync"); err == nil && fsync != "" {
			f.Detail += ", appendfsync " + fsync
			if fsync == "no" {
				f.Status = Warn
				f.Detail += ": the OS decides when writes reach the disk"
				f.Fix = "CONFIG SET appendfsync everysec (at most about a second of writes lost on a crash)"
			}
		}
		return f
	}
	f.Status = Warn
	f.Fix = "CONFIG SET appendonly yes (and appendonly yes in redis.conf), appendfsync everysec"
	save, err := srv.ConfigGet(ctx, "save")
	switch {
	case err != nil:
		f.Detail = "appendonly no; snapshots unknown (CONFIG GET refused): a crash loses the writes since the last snapshot, if any"
	case strings.TrimSpace(save) == "":
		f.Detail = "appendonly no and no snapshots (save \"\"): a restart loses every job"
	default:
		f.Detail = fmt.Sprintf("snapshots only (save %q): a crash loses the jobs written since the last one", save)
	}
	return f
}

// checkCluster compares the server's mode with the client's: cluster is whether the Doctor was
// given a cluster client (the CLI's --cluster).
func checkCluster(info map[string]string, cluster bool) Finding {
	enabled := info["cluster_enabled"] == "1"
	switch {
	case enabled && !cluster:
		return Finding{Check: "cluster", Status: Fail, Detail: "Redis is a cluster node, but --cluster is not set",
			Fix: "add --cluster (or CONVEYOR_CLUSTER=true) with a seed URL: redis://h1:p1?addr=h2:p2"}
	case enabled:
		return Finding{Check: "cluster", Status: OK, Detail: "cluster mode"}
	case cluster:
		return Finding{Check: "cluster", Status: Fail, Detail: "Redis is standalone, but --cluster is set",
			Fix: "drop --cluster (and CONVEYOR_CLUSTER): a standalone server takes a plain redis://host:port/db URL"}
	default:
		return Finding{Check: "cluster", Status: OK, Detail: "standalone"}
	}
}

func checkClock(ctx context.Context, srv jobstate.Server) Finding {
	t0 := time.Now()
	rt, err := srv.Time(ctx)
	if err != nil {
		return refusedBy("clock", "TIME", err)
	}
	rtt := time.Since(t0)
	return clockFinding(rt.Sub(t0.Add(rtt/2)).Round(time.Millisecond), rtt)
}

// clockFinding judges the skew of Redis's clock against this host's, measured over a round trip.
func clockFinding(skew, rtt time.Duration) Finding {
	f := Finding{Check: "clock", Status: OK,
		Detail: fmt.Sprintf("Redis's clock is %s %s this host's (round trip %s)", skew.Abs(), aheadBehind(skew), rtt.Round(time.Microsecond))}
	switch a := skew.Abs(); {
	case a > skewFail:
		f.Status = Fail
	case a > skewWarn:
		f.Status = Warn
	}
	if f.Status != OK {
		f.Fix = "sync the clocks of this host and Redis's with NTP (chronyc tracking shows the offset): delayed jobs' due times come from the publisher's clock"
	}
	return f
}

func aheadBehind(d time.Duration) string {
	if d < 0 {
		return "behind"
	}
	return "ahead of"
}

// checkACL checks that the user of the connection may run what a worker runs, on the prefix's
// keys and channels. It uses ACL DRYRUN when the user may run it (an admin). Else it runs
// commands that change nothing (or a key of its own that expires in a second).
func checkACL(ctx context.Context, store *jobstate.Store) Finding {
	user, err := store.WhoAmI(ctx)
	if err != nil {
		user = "" // ACL WHOAMI is not in @connection: a least-privilege user may lack it
	}
	if user != "" {
		// Redis refusing ACL DRYRUN itself (no permission) falls back to trying the commands.
		if denied, err := store.DryRunWorker(ctx, user); err == nil {
			return aclFinding(user, denied, "ACL DRYRUN")
		}
	}
	return aclFinding(user, store.ProbeWorker(ctx), "trying the commands")
}

func aclFinding(user string, denied []jobstate.Denial, how string) Finding {
	who := "the user"
	if user != "" {
		who = "user " + user
	}
	if len(denied) == 0 {
		return Finding{Check: "acl", Status: OK, Detail: fmt.Sprintf("%s may run what a worker runs (%s)", who, how)}
	}
	texts := make([]string, len(denied))
	for i, d := range denied {
		texts[i] = d.Command + ": " + d.Reason
	}
	return Finding{Check: "acl", Status: Fail,
		Detail: fmt.Sprintf("%s may not run what a worker needs (%s): %s", who, how, strings.Join(texts, "; ")),
		Fix:    "grant the least-privilege rule of docs/OPERATIONS.md \"Least-privilege user\" (ACL SETUSER ...)"}
}
