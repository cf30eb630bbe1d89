package pipeline

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

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// minRedisVersion is the oldest Redis Conveyor runs on (docs/OPERATIONS.md "Redis": scripts
// replicate their effects, XCLAIM drops deleted entries, ACL DRYRUN exists).
var minRedisVersion = [3]int{7, 0, 0}

// Thresholds of the doctor's findings.
const (
	doctorTimeout   = 10 * time.Second
	memoryWarnShare = 0.8                    // used memory over this share of maxmemory is a warning
	skewWarn        = 500 * time.Millisecond // clock skew a delayed job's due time would carry
	skewFail        = 30 * time.Second
)

// The statuses of a DoctorFinding.
const (
	DoctorOK   = "ok"
	DoctorWarn = "warn"
	DoctorFail = "fail"
)

// DoctorFinding is the verdict of one check of Inspector.Doctor.
type DoctorFinding struct {
	// Check is what was checked: version, eviction, memory, persistence, cluster, acl or clock.
	Check string `json:"check"`
	// Node is the server's address when the check is per node on a cluster; "" otherwise.
	Node string `json:"node,omitempty"`
	// Status is DoctorOK, DoctorWarn or DoctorFail.
	Status string `json:"status"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says in one line what to do, for a warning or a failure.
	Fix string `json:"fix,omitempty"`
}

// DoctorReport is what Inspector.Doctor found.
type DoctorReport struct {
	// Findings has one finding per check, per master of a cluster for the checks of one
	// server, in the order version, eviction, memory, persistence, cluster, clock, acl.
	Findings []DoctorFinding `json:"findings"`
	// Failed counts the findings whose status is DoctorFail.
	Failed int `json:"failed"`
}

// Doctor checks that the Redis behind the Inspector (each master of a cluster) is set up to
// keep jobs safe. It checks the version, eviction policy, memory against maxmemory,
// persistence and cluster mode. It checks the commands a worker needs under the connection's
// ACL user, and clock skew. A check Redis does not allow the user (INFO or CONFIG under a
// least-privilege ACL) is a warning that says so. It takes at most 10 seconds. The error is a
// failed PING's: Redis unreachable or refusing the connection. A failed check is a finding,
// not an error.
func (i *Inspector) Doctor(ctx context.Context) (DoctorReport, error) {
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	rdb, cluster := i.rdb, false
	if err := rdb.Ping(ctx).Err(); err != nil {
		// A cluster client on a standalone server fails every command (its CLUSTER SLOTS is
		// refused). So check the seed server itself. Its cluster finding then says to drop
		// --cluster, rather than answer with Redis's "cluster support disabled".
		cc, ok := rdb.(*redis.ClusterClient)
		if !ok {
			return DoctorReport{}, rediserr.Wrap("doctor", err)
		}
		seed := standaloneSeed(ctx, cc)
		if seed == nil {
			return DoctorReport{}, rediserr.Wrap("doctor", err)
		}
		defer func() { _ = seed.Close() }()
		rdb, cluster = seed, true
	}
	r := DoctorReport{Findings: diagnose(ctx, rdb, i.cfg.Prefix, cluster)}
	for _, f := range r.Findings {
		if f.Status == DoctorFail {
			r.Failed++
		}
	}
	return r, nil
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
func (i *Inspector) Memory(ctx context.Context) ([]NodeMemory, error) {
	var (
		mu  sync.Mutex
		out []NodeMemory
	)
	err := forEachNode(ctx, i.rdb, func(ctx context.Context, node string, c redis.Cmdable) error {
		raw, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		info := parseInfo(raw)
		m := NodeMemory{Node: node, Policy: info["maxmemory_policy"], MaxMemory: info["maxmemory_human"], Used: info["used_memory_human"]}
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

// standaloneSeed returns a plain client on the first seed address of cc when that server
// answers and is not a cluster node (INFO cluster says cluster_enabled:0), nil otherwise. The
// caller closes it.
func standaloneSeed(ctx context.Context, cc *redis.ClusterClient) *redis.Client {
	o := cc.Options()
	if len(o.Addrs) == 0 {
		return nil
	}
	c := redis.NewClient(&redis.Options{
		Addr: o.Addrs[0], Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		Dialer: o.Dialer, Protocol: o.Protocol, DialTimeout: o.DialTimeout,
		ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, MaxRetries: -1,
	})
	raw, err := c.Info(ctx, "cluster").Result()
	if err != nil || parseInfo(raw)["cluster_enabled"] == "1" {
		_ = c.Close()
		return nil
	}
	return c
}

// diagnose runs every check. Per-node checks run on each master of a cluster. The wantCluster
// flag says the user asked for a cluster (--cluster) though rdb is a plain client. That is a
// cluster client given a standalone server (see Doctor).
func diagnose(ctx context.Context, rdb redis.UniversalClient, prefix string, wantCluster bool) []DoctorFinding {
	var (
		mu sync.Mutex
		fs []DoctorFinding
	)
	_, cluster := rdb.(*redis.ClusterClient)
	cluster = cluster || wantCluster
	_ = forEachNode(ctx, rdb, func(ctx context.Context, node string, c redis.Cmdable) error {
		nf := checkNode(ctx, c, cluster)
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
	slices.SortStableFunc(fs, func(x, y DoctorFinding) int {
		if d := slices.Index(order, x.Check) - slices.Index(order, y.Check); d != 0 {
			return d
		}
		return strings.Compare(x.Node, y.Node)
	})
	return append(fs, checkACL(ctx, rdb, prefix)...)
}

// forEachNode calls fn on each master of a cluster client, or on the client itself.
func forEachNode(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, node string, c redis.Cmdable) error) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return fn(ctx, c.Options().Addr, c)
		})
	}
	node := ""
	if c, ok := rdb.(*redis.Client); ok {
		node = c.Options().Addr
	}
	return fn(ctx, node, rdb)
}

// parseInfo reads INFO's "field:value" lines.
func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// redisMessage is the text of the Redis error in err.
func redisMessage(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return rerr.Error()
	}
	return err.Error()
}

// refusedBy says that Redis did not let the user run cmd, as a warning. The server may not
// have cmd at all (an embedded or a compatible Redis). Then it says so: an ACL would not help.
func refusedBy(check, cmd string, err error) DoctorFinding {
	if unsupported(err) {
		return notSupported(check, cmd, redisMessage(err))
	}
	return DoctorFinding{Check: check, Status: DoctorWarn,
		Detail: fmt.Sprintf("cannot check: Redis refused %s (%s)", cmd, redisMessage(err)),
		Fix:    "run 'conveyor doctor' as a user allowed " + cmd + " (an admin), or allow it: ACL SETUSER <user> +" + strings.ToLower(strings.Fields(cmd)[0])}
}

// notSupported is the warning of a check that the server cannot answer. The server does not
// have cmd (or does not report it), as an embedded Redis (the demo's) or some compatible
// servers.
func notSupported(check, cmd, why string) DoctorFinding {
	detail := "cannot check: this server does not support " + cmd
	if why != "" {
		detail += " (" + why + ")"
	}
	return DoctorFinding{Check: check, Status: DoctorWarn, Detail: detail,
		Fix: fmt.Sprintf("an embedded or Redis-compatible server lacks it: run 'conveyor doctor' against the Redis %d.%d or later that production uses",
			minRedisVersion[0], minRedisVersion[1])}
}

// checkNode runs the checks of one server.
func checkNode(ctx context.Context, c redis.Cmdable, cluster bool) []DoctorFinding {
	var fs []DoctorFinding
	info, err := readInfo(ctx, c, "server", "memory", "persistence", "cluster")
	if err != nil {
		fs = append(fs, refusedBy("version", "INFO", err), refusedBy("eviction", "INFO", err),
			refusedBy("memory", "INFO", err), refusedBy("persistence", "INFO", err), refusedBy("cluster", "INFO", err))
		return append(fs, checkClock(ctx, c))
	}
	// Each check needs its section: a server that leaves one out cannot be checked on it.
	has := func(field string) bool { _, ok := info[field]; return ok }
	for _, chk := range []struct {
		check, section, field string
		run                   func() DoctorFinding
	}{
		{"version", "server", "redis_version", func() DoctorFinding { return checkVersion(info["redis_version"]) }},
		{"eviction", "memory", "maxmemory_policy", func() DoctorFinding { return evictionFinding(info["maxmemory_policy"]) }},
		{"memory", "memory", "used_memory", func() DoctorFinding { return checkMemory(info) }},
		{"persistence", "persistence", "aof_enabled", func() DoctorFinding { return checkPersistence(ctx, c, info) }},
		{"cluster", "cluster", "cluster_enabled", func() DoctorFinding { return checkCluster(info, cluster) }},
	} {
		if has(chk.field) {
			fs = append(fs, chk.run())
		} else {
			fs = append(fs, notSupported(chk.check, "INFO "+chk.section, ""))
		}
	}
	return append(fs, checkClock(ctx, c))
}

func checkVersion(v string) DoctorFinding {
	f := DoctorFinding{Check: "version", Status: DoctorOK, Detail: "Redis " + v}
	var got [3]int
	for i, p := range strings.SplitN(v, ".", 3) {
		got[i], _ = strconv.Atoi(p)
	}
	if slices.Compare(got[:], minRedisVersion[:]) < 0 {
		f.Status = DoctorFail
		f.Detail += fmt.Sprintf(": Conveyor needs %d.%d or later", minRedisVersion[0], minRedisVersion[1])
		f.Fix = fmt.Sprintf("upgrade Redis to %d.%d or later", minRedisVersion[0], minRedisVersion[1])
	}
	return f
}

// evictionFix is the one-line fix of a maxmemory-policy other than noeviction.
const evictionFix = "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf (a managed Redis: its parameter group)"

func evictionFinding(policy string) DoctorFinding {
	if policy == "noeviction" {
		return DoctorFinding{Check: "eviction", Status: DoctorOK, Detail: "maxmemory-policy noeviction: a full Redis refuses writes, it deletes nothing"}
	}
	return DoctorFinding{Check: "eviction", Status: DoctorFail,
		Detail: fmt.Sprintf("maxmemory-policy %s: when memory is full Redis deletes keys, jobs among them", policy),
		Fix:    evictionFix}
}

func checkMemory(info map[string]string) DoctorFinding {
	used, _ := strconv.ParseInt(info["used_memory"], 10, 64)
	limit, _ := strconv.ParseInt(info["maxmemory"], 10, 64)
	f := DoctorFinding{Check: "memory", Status: DoctorOK}
	if limit == 0 {
		f.Status = DoctorWarn
		f.Detail = fmt.Sprintf("used %s, no maxmemory: Redis grows until the host runs out of memory", info["used_memory_human"])
		f.Fix = "set maxmemory to what the host can give Redis (CONFIG SET maxmemory 4gb), with noeviction"
		return f
	}
	share := float64(used) / float64(limit)
	f.Detail = fmt.Sprintf("used %s of maxmemory %s (%.0f%%)", info["used_memory_human"], info["maxmemory_human"], 100*share)
	switch {
	case used >= limit:
		f.Status = DoctorFail
		f.Detail += ": Redis refuses writes, publishes fail"
		f.Fix = "raise maxmemory, purge dead jobs (conveyor dead purge --all) or lower the retention (worker --retention)"
	case share > memoryWarnShare:
		f.Status = DoctorWarn
		f.Fix = "raise maxmemory, or lower what is kept (docs/OPERATIONS.md \"Memory in Redis\")"
	}
	return f
}

func checkPersistence(ctx context.Context, c redis.Cmdable, info map[string]string) DoctorFinding {
	f := DoctorFinding{Check: "persistence"}
	if info["aof_enabled"] == "1" {
		f.Status, f.Detail = DoctorOK, "appendonly yes"
		if cfg, err := c.ConfigGet(ctx, "appendfsync").Result(); err == nil && cfg["appendfsync"] != "" {
			f.Detail += ", appendfsync " + cfg["appendfsync"]
			if cfg["appendfsync"] == "no" {
				f.Status = DoctorWarn
				f.Detail += ": the OS decides when writes reach the disk"
				f.Fix = "CONFIG SET appendfsync everysec (at most about a second of writes lost on a crash)"
			}
		}
		return f
	}
	f.Status = DoctorWarn
	f.Fix = "CONFIG SET appendonly yes (and appendonly yes in redis.conf), appendfsync everysec"
	cfg, err := c.ConfigGet(ctx, "save").Result()
	switch {
	case err != nil:
		f.Detail = "appendonly no; snapshots unknown (CONFIG GET refused): a crash loses the writes since the last snapshot, if any"
	case strings.TrimSpace(cfg["save"]) == "":
		f.Detail = "appendonly no and no snapshots (save \"\"): a restart loses every job"
	default:
		f.Detail = fmt.Sprintf("snapshots only (save %q): a crash loses the jobs written since the last one", cfg["save"])
	}
	return f
}

// checkCluster compares the server's mode with the client's: cluster is whether the Inspector
// was given a cluster client (the CLI's --cluster).
func checkCluster(info map[string]string, cluster bool) DoctorFinding {
	enabled := info["cluster_enabled"] == "1"
	switch {
	case enabled && !cluster:
		return DoctorFinding{Check: "cluster", Status: DoctorFail, Detail: "Redis is a cluster node, but --cluster is not set",
			Fix: "add --cluster (or CONVEYOR_CLUSTER=true) with a seed URL: redis://h1:p1?addr=h2:p2"}
	case enabled:
		return DoctorFinding{Check: "cluster", Status: DoctorOK, Detail: "cluster mode"}
	case cluster:
		return DoctorFinding{Check: "cluster", Status: DoctorFail, Detail: "Redis is standalone, but --cluster is set",
			Fix: "drop --cluster (and CONVEYOR_CLUSTER): a standalone server takes a plain redis://host:port/db URL"}
	default:
		return DoctorFinding{Check: "cluster", Status: DoctorOK, Detail: "standalone"}
	}
}

func checkClock(ctx context.Context, c redis.Cmdable) DoctorFinding {
	t0 := time.Now()
	rt, err := c.Time(ctx).Result()
	if err != nil {
		return refusedBy("clock", "TIME", err)
	}
	rtt := time.Since(t0)
	skew := rt.Sub(t0.Add(rtt / 2)).Round(time.Millisecond)
	f := DoctorFinding{Check: "clock", Status: DoctorOK,
		Detail: fmt.Sprintf("Redis's clock is %s %s this host's (round trip %s)", skew.Abs(), aheadBehind(skew), rtt.Round(time.Microsecond))}
	switch a := skew.Abs(); {
	case a > skewFail:
		f.Status = DoctorFail
	case a > skewWarn:
		f.Status = DoctorWarn
	}
	if f.Status != DoctorOK {
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

// workerCommands are the commands a worker (and the CLI) sends, as ACL DRYRUN checks them.
// Where a command takes a key or channel, it gets one of the prefix. These are those of a
// queue named "doctor", which nothing creates.
func workerCommands(prefix string) [][]string {
	q := keys.New(prefix, "doctor")
	key := q.Stream()
	return [][]string{
		{"PING"}, {"TIME"},
		{"EVALSHA", "0000000000000000000000000000000000000000", "1", key},
		{"SCRIPT", "LOAD", "return 1"},
		{"XREADGROUP", "GROUP", "g", "c", "STREAMS", key, ">"},
		{"XADD", key, "*", "f", "v"}, {"XACK", key, "g", "0-1"},
		{"XGROUP", "CREATE", key, "g", "$", "MKSTREAM"},
		{"XPENDING", key, "g"}, {"XAUTOCLAIM", key, "g", "c", "0", "0-0"}, {"XCLAIM", key, "g", "c", "0", "0-1"},
		{"XINFO", "GROUPS", key},
		{"HGETALL", key}, {"HSET", key, "f", "v"}, {"ZADD", key, "1", "m"}, {"ZRANGE", key, "0", "-1"},
		{"SADD", keys.Queues(prefix), "q"}, {"SMEMBERS", keys.Queues(prefix)},
		{"SET", key, "v", "PX", "1000", "NX"}, {"DEL", key}, {"PEXPIRE", key, "1000"},
		{"SUBSCRIBE", q.Wake()}, {"PUBLISH", q.Wake(), "0"},
		// The heartbeat (heartbeat.go) and its listing.
		{"ZREMRANGEBYSCORE", keys.Workers(prefix), "-inf", "0"}, {"ZREM", keys.Workers(prefix), "m"},
		{"GET", keys.WorkerBeat(prefix, "doctor")}, {"PTTL", keys.WorkerBeat(prefix, "doctor")},
	}
}

// checkACL checks that the user of the connection may run what a worker runs, on the
// prefix's keys and channels. It uses ACL DRYRUN when the user may run it (an admin). Else it
// runs commands that change nothing (or a key of its own that expires in a second).
func checkACL(ctx context.Context, rdb redis.UniversalClient, prefix string) []DoctorFinding {
	user, err := rdb.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil {
		user = "" // ACL WHOAMI is not in @connection: a least-privilege user may lack it
	}
	if user != "" {
		var denied []string
		dryrun := true
		for _, cmd := range workerCommands(prefix) {
			args := append([]any{"ACL", "DRYRUN", user}, toAnySlice(cmd)...)
			res, err := rdb.Do(ctx, args...).Text()
			if err != nil {
				dryrun = false // refused (no permission for ACL DRYRUN): try the commands instead
				break
			}
			if res != "OK" {
				denied = append(denied, cmd[0]+": "+res)
			}
		}
		if dryrun {
			return []DoctorFinding{aclFinding(user, denied, "ACL DRYRUN")}
		}
	}
	var denied []string
	q := keys.New(prefix, "doctor")
	probe := q.Job("probe") // a job key no job has: the SET below expires in a second
	for _, cmd := range [][]any{
		{"TIME"}, {"SMEMBERS", keys.Queues(prefix)}, {"XINFO", "GROUPS", probe},
		{"EVAL", "return 1", "1", probe}, {"SET", probe, "1", "PX", "1000"}, {"DEL", probe},
		{"PUBLISH", q.Wake(), "0"},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); rediserr.IsNoPerm(err) {
			denied = append(denied, fmt.Sprint(cmd[0])+": "+redisMessage(err))
		}
	}
	return []DoctorFinding{aclFinding(user, denied, "trying the commands")}
}

func aclFinding(user string, denied []string, how string) DoctorFinding {
	who := "the user"
	if user != "" {
		who = "user " + user
	}
	if len(denied) == 0 {
		return DoctorFinding{Check: "acl", Status: DoctorOK, Detail: fmt.Sprintf("%s may run what a worker runs (%s)", who, how)}
	}
	return DoctorFinding{Check: "acl", Status: DoctorFail,
		Detail: fmt.Sprintf("%s may not run what a worker needs (%s): %s", who, how, strings.Join(denied, "; ")),
		Fix:    "grant the least-privilege rule of docs/OPERATIONS.md \"Least-privilege user\" (ACL SETUSER ...)"}
}

func toAnySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
