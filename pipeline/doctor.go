package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

func init() { addCommand(newDoctorCmd) }

// minRedisVersion is the oldest Redis Conveyor runs on (docs/OPERATIONS.md "Redis": scripts
// replicate their effects, XCLAIM drops deleted entries, ACL DRYRUN exists).
var minRedisVersion = [3]int{7, 0, 0}

// Thresholds of doctor's findings.
const (
	doctorTimeout   = 10 * time.Second
	memoryWarnShare = 0.8                    // used memory over this share of maxmemory is a warning
	skewWarn        = 500 * time.Millisecond // clock skew a delayed job's due time would carry
	skewFail        = 30 * time.Second
	evictionTimeout = 3 * time.Second // bounds the start-up check of workers and serve
)

// Finding statuses.
const (
	findingOK   = "ok"
	findingWarn = "warn"
	findingFail = "fail"
)

// finding is one line of `conveyor doctor`, and one object of its --json output.
type finding struct {
	Check  string `json:"check"`          // version, eviction, memory, persistence, cluster, acl, clock
	Node   string `json:"node,omitempty"` // the server's address, when the check is per node
	Status string `json:"status"`         // ok, warn or fail
	Detail string `json:"detail"`         // what was found
	Fix    string `json:"fix,omitempty"`  // one line: what to do (warn and fail)
}

func newDoctorCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check that Redis is set up to keep jobs safe, and say how to fix what is not",
		Long: `Check the Redis of --redis (each master of a cluster) for what Conveyor needs, and print one
finding per check, ok, warn or fail, with a one-line fix for the others:

  version      Redis ` + fmt.Sprintf("%d.%d", minRedisVersion[0], minRedisVersion[1]) + ` or later
  eviction     maxmemory-policy noeviction: any other policy deletes keys, jobs among them, when
               Redis is full
  memory       used memory against maxmemory (full: publishes are refused)
  persistence  appendonly, or at least snapshots: without either a restart loses every job
  cluster      standalone or cluster, and whether --cluster matches
  acl          the commands, keys and channels a worker needs, for the user of --redis
  clock        the skew between this host's clock and Redis's (TIME): delayed jobs' due times
               come from the publisher's clock

A check that Redis does not allow the user (INFO or CONFIG under a least-privilege ACL) is a
warning that says so. Exit 1 when a check fails, 0 otherwise.`,
		Example: `  conveyor doctor
  conveyor doctor --redis rediss://admin:pw@redis.internal:6380/0 --tls-ca ca.pem --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rdb, err := a.redis()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), doctorTimeout)
			defer cancel()
			if err := rdb.Ping(ctx).Err(); err != nil {
				return err
			}
			fs := diagnose(ctx, rdb, a.cluster, a.prefix)
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), fs); err != nil {
					return err
				}
			} else if err := printFindings(cmd, fs); err != nil {
				return err
			}
			failed := 0
			for _, f := range fs {
				if f.Status == findingFail {
					failed++
				}
			}
			switch failed {
			case 0:
				return nil
			case 1:
				return errors.New("1 check failed; see its fix")
			default:
				return fmt.Errorf("%d checks failed; see their fixes", failed)
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as one JSON array")
	return cmd
}

func printFindings(cmd *cobra.Command, fs []finding) error {
	tw := newTable(cmd.OutOrStdout())
	multi := slices.ContainsFunc(fs, func(f finding) bool { return f.Node != "" })
	for _, f := range fs {
		where := ""
		if multi && f.Node != "" {
			where = " (" + f.Node + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\n", strings.ToUpper(f.Status), f.Check, f.Detail, where)
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	return tw.Flush()
}

// diagnose runs every check. Per-node checks run on each master of a cluster.
func diagnose(ctx context.Context, rdb redis.UniversalClient, cluster bool, prefix string) []finding {
	var (
		mu sync.Mutex
		fs []finding
	)
	_ = forEachNode(ctx, rdb, func(ctx context.Context, node string, c redis.Cmdable) error {
		nf := checkNode(ctx, c, cluster)
		if _, isCluster := rdb.(*redis.ClusterClient); !isCluster {
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
	slices.SortStableFunc(fs, func(x, y finding) int {
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

// refusedBy says that Redis did not let the user run cmd, as a warning.
func refusedBy(check, cmd string, err error) finding {
	return finding{Check: check, Status: findingWarn,
		Detail: fmt.Sprintf("cannot check: Redis refused %s (%s)", cmd, redisMessage(err)),
		Fix:    "run 'conveyor doctor' as a user allowed " + cmd + " (an admin), or allow it: ACL SETUSER <user> +" + strings.ToLower(strings.Fields(cmd)[0])}
}

// checkNode runs the checks of one server.
func checkNode(ctx context.Context, c redis.Cmdable, cluster bool) []finding {
	var fs []finding
	raw, err := c.Info(ctx, "server", "memory", "persistence", "cluster").Result()
	if err != nil {
		fs = append(fs, refusedBy("version", "INFO", err), refusedBy("eviction", "INFO", err),
			refusedBy("memory", "INFO", err), refusedBy("persistence", "INFO", err), refusedBy("cluster", "INFO", err))
	} else {
		info := parseInfo(raw)
		fs = append(fs, checkVersion(info["redis_version"]), evictionFinding(info["maxmemory_policy"]),
			checkMemory(info), checkPersistence(ctx, c, info), checkCluster(info, cluster))
	}
	return append(fs, checkClock(ctx, c))
}

func checkVersion(v string) finding {
	f := finding{Check: "version", Status: findingOK, Detail: "Redis " + v}
	var got [3]int
	for i, p := range strings.SplitN(v, ".", 3) {
		got[i], _ = strconv.Atoi(p)
	}
	if slices.Compare(got[:], minRedisVersion[:]) < 0 {
		f.Status = findingFail
		f.Detail += fmt.Sprintf(": Conveyor needs %d.%d or later", minRedisVersion[0], minRedisVersion[1])
		f.Fix = fmt.Sprintf("upgrade Redis to %d.%d or later", minRedisVersion[0], minRedisVersion[1])
	}
	return f
}

// evictionFix is the one-line fix of a maxmemory-policy other than noeviction.
const evictionFix = "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf (a managed Redis: its parameter group)"

func evictionFinding(policy string) finding {
	if policy == "noeviction" {
		return finding{Check: "eviction", Status: findingOK, Detail: "maxmemory-policy noeviction: a full Redis refuses writes, it deletes nothing"}
	}
	return finding{Check: "eviction", Status: findingFail,
		Detail: fmt.Sprintf("maxmemory-policy %s: when memory is full Redis deletes keys, jobs among them", policy),
		Fix:    evictionFix}
}

func checkMemory(info map[string]string) finding {
	used, _ := strconv.ParseInt(info["used_memory"], 10, 64)
	limit, _ := strconv.ParseInt(info["maxmemory"], 10, 64)
	f := finding{Check: "memory", Status: findingOK}
	if limit == 0 {
		f.Status = findingWarn
		f.Detail = fmt.Sprintf("used %s, no maxmemory: Redis grows until the host runs out of memory", info["used_memory_human"])
		f.Fix = "set maxmemory to what the host can give Redis (CONFIG SET maxmemory 4gb), with noeviction"
		return f
	}
	share := float64(used) / float64(limit)
	f.Detail = fmt.Sprintf("used %s of maxmemory %s (%.0f%%)", info["used_memory_human"], info["maxmemory_human"], 100*share)
	switch {
	case used >= limit:
		f.Status = findingFail
		f.Detail += ": Redis refuses writes, publishes fail"
		f.Fix = "raise maxmemory, purge dead jobs (conveyor dead purge --all) or lower the retention (worker --retention)"
	case share > memoryWarnShare:
		f.Status = findingWarn
		f.Fix = "raise maxmemory, or lower what is kept (docs/OPERATIONS.md \"Memory in Redis\")"
	}
	return f
}

func checkPersistence(ctx context.Context, c redis.Cmdable, info map[string]string) finding {
	f := finding{Check: "persistence"}
	if info["aof_enabled"] == "1" {
		f.Status, f.Detail = findingOK, "appendonly yes"
		if cfg, err := c.ConfigGet(ctx, "appendfsync").Result(); err == nil && cfg["appendfsync"] != "" {
			f.Detail += ", appendfsync " + cfg["appendfsync"]
			if cfg["appendfsync"] == "no" {
				f.Status = findingWarn
				f.Detail += ": the OS decides when writes reach the disk"
				f.Fix = "CONFIG SET appendfsync everysec (at most about a second of writes lost on a crash)"
			}
		}
		return f
	}
	f.Status = findingWarn
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

func checkCluster(info map[string]string, cluster bool) finding {
	enabled := info["cluster_enabled"] == "1"
	switch {
	case enabled && !cluster:
		return finding{Check: "cluster", Status: findingFail, Detail: "Redis is a cluster node, but --cluster is not set",
			Fix: "add --cluster (or CONVEYOR_CLUSTER=true) with a seed URL: redis://h1:p1?addr=h2:p2"}
	case enabled:
		return finding{Check: "cluster", Status: findingOK, Detail: "cluster mode"}
	default:
		return finding{Check: "cluster", Status: findingOK, Detail: "standalone"}
	}
}

func checkClock(ctx context.Context, c redis.Cmdable) finding {
	t0 := time.Now()
	rt, err := c.Time(ctx).Result()
	if err != nil {
		return refusedBy("clock", "TIME", err)
	}
	rtt := time.Since(t0)
	skew := rt.Sub(t0.Add(rtt / 2)).Round(time.Millisecond)
	f := finding{Check: "clock", Status: findingOK,
		Detail: fmt.Sprintf("Redis's clock is %s %s this host's (round trip %s)", absDur(skew), aheadBehind(skew), rtt.Round(time.Microsecond))}
	switch a := absDur(skew); {
	case a > skewFail:
		f.Status = findingFail
	case a > skewWarn:
		f.Status = findingWarn
	}
	if f.Status != findingOK {
		f.Fix = "sync the clocks of this host and Redis's with NTP (chronyc tracking shows the offset): delayed jobs' due times come from the publisher's clock"
	}
	return f
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func aheadBehind(d time.Duration) string {
	if d < 0 {
		return "behind"
	}
	return "ahead of"
}

// workerCommands are the commands a worker (and the CLI) sends, as ACL DRYRUN checks them:
// with a key or channel of the prefix where the command takes one.
func workerCommands(prefix string) [][]string {
	key := prefix + ":{doctor}:stream"
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
		{"SADD", prefix + ":queues", "q"}, {"SMEMBERS", prefix + ":queues"},
		{"SET", key, "v", "PX", "1000", "NX"}, {"DEL", key}, {"PEXPIRE", key, "1000"},
		{"SUBSCRIBE", prefix + ":{doctor}:wake"}, {"PUBLISH", prefix + ":{doctor}:wake", "0"},
	}
}

// checkACL checks that the user of the connection may run what a worker runs, on the
// prefix's keys and channels: with ACL DRYRUN when the user may run it (an admin), else by
// running commands that change nothing (or a key of its own that expires in a second).
func checkACL(ctx context.Context, rdb redis.UniversalClient, prefix string) []finding {
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
			return []finding{aclFinding(user, denied, "ACL DRYRUN")}
		}
	}
	var denied []string
	probe := prefix + ":{doctor}:probe"
	for _, cmd := range [][]any{
		{"TIME"}, {"SMEMBERS", prefix + ":queues"}, {"XINFO", "GROUPS", probe},
		{"EVAL", "return 1", "1", probe}, {"SET", probe, "1", "PX", "1000"}, {"DEL", probe},
		{"PUBLISH", prefix + ":{doctor}:wake", "0"},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil && redis.HasErrorPrefix(err, "NOPERM") {
			denied = append(denied, fmt.Sprint(cmd[0])+": "+redisMessage(err))
		}
	}
	return []finding{aclFinding(user, denied, "trying the commands")}
}

func aclFinding(user string, denied []string, how string) finding {
	who := "the user"
	if user != "" {
		who = "user " + user
	}
	if len(denied) == 0 {
		return finding{Check: "acl", Status: findingOK, Detail: fmt.Sprintf("%s may run what a worker runs (%s)", who, how)}
	}
	return finding{Check: "acl", Status: findingFail,
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

// warnEviction logs one warning per server whose maxmemory-policy is not noeviction: such a
// Redis deletes keys when full, and a deleted job hash or stream is a lost job. Workers and
// serve call it at start. A Redis that does not let the user read INFO (a least-privilege ACL
// without +info, some managed services) or does not answer is noted at debug: the check is
// advice, not a condition to start.
func warnEviction(ctx context.Context, log zerolog.Logger, rdb redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(ctx, evictionTimeout)
	defer cancel()
	err := forEachNode(ctx, rdb, func(ctx context.Context, node string, c redis.Cmdable) error {
		raw, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		policy := parseInfo(raw)["maxmemory_policy"]
		if policy != "" && policy != "noeviction" {
			log.Warn().Str("redis", node).Str("maxmemory_policy", policy).
				Msgf("Redis evicts keys when full (maxmemory-policy %s): eviction deletes jobs; fix: %s; 'conveyor doctor' checks the rest", policy, evictionFix)
		}
		return nil
	})
	if err != nil {
		log.Debug().Err(err).Msg("cannot check Redis's maxmemory-policy (INFO memory); 'conveyor doctor' as an admin user checks it")
	}
}

// outOfMemory describes a publish that Redis refused for lack of memory, with its maxmemory
// and used memory when INFO answers.
func (a *app) outOfMemory(err error, url string) string {
	numbers := ""
	if a.rdb != nil {
		ctx, cancel := context.WithTimeout(context.Background(), evictionTimeout)
		defer cancel()
		if raw, ierr := a.rdb.Info(ctx, "memory").Result(); ierr == nil {
			info := parseInfo(raw)
			numbers = fmt.Sprintf(" (maxmemory %s, used %s)", info["maxmemory_human"], info["used_memory_human"])
		}
	}
	return fmt.Sprintf("Redis at %s refused the write: out of memory%s: %s; free memory (conveyor dead purge, a shorter worker --retention) or raise maxmemory; 'conveyor doctor' shows the rest",
		url, numbers, strings.TrimSuffix(redisMessage(err), "."))
}
