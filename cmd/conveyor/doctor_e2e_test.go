package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/doctor"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// doctor runs `conveyor doctor --json` and returns its exit code and findings by check.
func (c *cli) doctor(t *testing.T, args ...string) (int, map[string]doctor.Finding) {
	t.Helper()
	r := c.run(t, append([]string{"doctor", "--json"}, args...)...)
	var fs []doctor.Finding
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fs), "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	byCheck := map[string]doctor.Finding{}
	for _, f := range fs {
		require.NotContains(t, byCheck, f.Check, "one finding per check on a standalone server")
		require.Contains(t, []string{"ok", "warn", "fail"}, f.Status)
		if f.Status != "ok" {
			require.NotEmpty(t, f.Fix, "%+v", f)
		}
		byCheck[f.Check] = f
	}
	for _, check := range []string{"version", "eviction", "memory", "persistence", "cluster", "acl", "clock"} {
		require.Contains(t, byCheck, check)
	}
	return r.code, byCheck
}

func requireFinding(t *testing.T, fs map[string]doctor.Finding, check, status, detail string) {
	t.Helper()
	require.Equal(t, status, fs[check].Status, "%+v", fs[check])
	require.Contains(t, fs[check].Detail, detail)
}

// TestDoctorE2E runs `conveyor doctor`, workers and serve against private servers set up
// well and badly: an evicting Redis without persistence, a durable one, a least-privilege
// user, a user short of permissions, and a Redis out of memory (where a publish is refused
// with the limit in its message while a worker keeps the jobs it finished until Redis takes
// them).
func TestDoctorE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildCLI(t)

	t.Run("Evicting", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru", "--maxmemory", "100mb", "--appendonly", "no", "--save", ""))
		c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
		code, fs := c.doctor(t)
		require.Equal(t, 1, code)
		requireFinding(t, fs, "eviction", "fail", "maxmemory-policy allkeys-lru: when memory is full Redis deletes keys, jobs among them")
		require.Equal(t, "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf (a managed Redis: its parameter group)", fs["eviction"].Fix)
		requireFinding(t, fs, "persistence", "warn", "appendonly no and no snapshots")
		requireFinding(t, fs, "version", "ok", "Redis ")
		requireFinding(t, fs, "memory", "ok", "of maxmemory 100.00M")
		requireFinding(t, fs, "cluster", "ok", "standalone")
		requireFinding(t, fs, "acl", "ok", "user default may run what a worker runs (ACL DRYRUN)")
		requireFinding(t, fs, "clock", "ok", "this host's")

		r := c.run(t, "doctor")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stdout, "FAIL  eviction     maxmemory-policy allkeys-lru")
		require.Contains(t, r.stdout, "fix: CONFIG SET maxmemory-policy noeviction")
		require.Equal(t, "conveyor: 1 check failed; see its fix\n", r.stderr)

		// Workers and serve warn at start, once, and start all the same.
		const warning = `"message":"Redis evicts keys when full (maxmemory-policy allkeys-lru): eviction deletes jobs; fix: CONFIG SET maxmemory-policy noeviction`
		w := c.start(t, "worker", "--queue", redistest.UniqueName(t), "--log-format", "json")
		s := c.start(t, "serve", "--addr", "127.0.0.1:0", "--log-format", "json")
		for _, p := range []*proc{w, s} {
			waitFor(t, 20*time.Second, 20*time.Millisecond, "the start-up lines", func() bool {
				return strings.Contains(p.output.String(), "SIGINT or SIGTERM stops it")
			})
			require.Equal(t, 1, strings.Count(p.output.String(), warning), p.output.String())
			require.Contains(t, p.output.String(), `"level":"warn","redis":"`+srv.Addr+`"`)
			require.Equal(t, 0, p.stop(t))
		}
	})

	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "noeviction", "--maxmemory", "1gb", "--appendonly", "yes"))
		c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
		code, fs := c.doctor(t)
		require.Equal(t, 0, code, "%+v", fs)
		for check, f := range fs {
			require.Equal(t, "ok", f.Status, "%s: %+v", check, f)
		}
		requireFinding(t, fs, "eviction", "ok", "maxmemory-policy noeviction")
		requireFinding(t, fs, "persistence", "ok", "appendonly yes, appendfsync everysec")

		w := c.start(t, "worker", "--queue", redistest.UniqueName(t), "--log-format", "json", "--log-level", "debug")
		waitFor(t, 20*time.Second, 20*time.Millisecond, "the worker to start", func() bool {
			return strings.Contains(w.output.String(), "worker started")
		})
		require.Equal(t, 0, w.stop(t))
		require.NotContains(t, w.output.String(), "maxmemory")
	})

	t.Run("LeastPrivilege", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		admin := srv.Client(t)
		ctx := context.Background()
		require.NoError(t, admin.Do(ctx, append([]any{"ACL", "SETUSER", "conveyor"}, toAny(strings.Fields(aclRule))...)...).Err())
		require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "~conveyor:*", "-@all", "+@connection", "+@read", "+time").Err())
		c := &cli{bin: bin, url: fmt.Sprintf("redis://conveyor:s3cret@%s/0", srv.Addr), rdb: admin}
		code, fs := c.doctor(t)
		requireFinding(t, fs, "acl", "ok", "the user may run what a worker runs (trying the commands)")
		requireFinding(t, fs, "clock", "ok", "this host's")
		// Without +info, the checks that read INFO say so.
		requireFinding(t, fs, "eviction", "warn", "cannot check: Redis refused INFO (NOPERM")
		require.Contains(t, fs["eviction"].Fix, "ACL SETUSER <user> +info")
		require.Equal(t, 0, code)

		// The documented rule plus +info lets every check run.
		require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "conveyor", "+info").Err())
		code, fs = c.doctor(t)
		require.Equal(t, 0, code)
		requireFinding(t, fs, "eviction", "ok", "noeviction")
		requireFinding(t, fs, "persistence", "warn", "snapshots unknown (CONFIG GET refused)")

		// A user short of what a worker needs.
		c.url = fmt.Sprintf("redis://reader:pw@%s/0", srv.Addr)
		code, fs = c.doctor(t)
		require.Equal(t, 1, code)
		requireFinding(t, fs, "acl", "fail", "may not run what a worker needs (trying the commands): EVAL: NOPERM")
		require.Contains(t, fs["acl"].Detail, "SET: NOPERM")
	})

	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		evicting := cl.Servers[1].Addr
		require.NoError(t, cl.Servers[1].Client(t).ConfigSet(context.Background(), "maxmemory-policy", "volatile-lru").Err())
		c := &cli{bin: bin, url: "redis://" + cl.Addrs[0] + "?addr=" + cl.Addrs[1] + "&addr=" + cl.Addrs[2]}

		// Each master is checked: the one that evicts fails.
		r := c.run(t, "doctor", "--cluster", "--json")
		require.Equal(t, 1, r.code, r.stderr)
		var fs []doctor.Finding
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &fs), r.stdout)
		nodes := map[string]string{} // node -> eviction status
		for _, f := range fs {
			switch f.Check {
			case "eviction":
				nodes[f.Node] = f.Status
			case "cluster":
				require.Equal(t, "ok", f.Status, "%+v", f)
				require.Equal(t, "cluster mode", f.Detail)
			}
		}
		require.Equal(t, map[string]string{cl.Addrs[0]: "ok", evicting: "fail", cl.Addrs[2]: "ok"}, nodes)

		// A worker warns once, for that master.
		w := c.start(t, "worker", "--cluster", "--queue", redistest.UniqueName(t), "--log-format", "json")
		waitFor(t, 20*time.Second, 20*time.Millisecond, "the worker to start", func() bool {
			return strings.Contains(w.output.String(), "worker started")
		})
		require.Equal(t, 0, w.stop(t))
		require.Equal(t, 1, strings.Count(w.output.String(), "eviction deletes jobs"), w.output.String())
		require.Contains(t, w.output.String(), `"redis":"`+evicting+`","maxmemory_policy":"volatile-lru"`)

		// A cluster node named without --cluster.
		c.url = "redis://" + cl.Addrs[0] + "/0"
		code, one := c.doctor(t)
		require.Equal(t, 1, code)
		requireFinding(t, one, "cluster", "fail", "Redis is a cluster node, but --cluster is not set")
	})

	t.Run("OutOfMemory", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
		queue := redistest.UniqueName(t)
		// The jobs are http calls that the test answers only once writes are refused, so that
		// they end then, however slow this machine is (sleep jobs of a fixed length could end
		// first on a loaded one).
		hook := newHeldCall(t)
		w := c.start(t, "worker", "--queue", queue, "--concurrency", "4", "--backoff-base", "50ms", "--log-level", "debug",
			"--http-allow", "127.0.0.1")
		var ids []string
		for range 4 {
			ids = append(ids, c.publishOne(t, "--queue", queue, "--type", "http", "--payload", hook.payload()))
		}
		waitFor(t, 20*time.Second, 20*time.Millisecond, "the jobs to run", func() bool {
			return hook.calls.Load() == 4 && c.stats(t, "--queue", queue).InProgress == 4
		})

		restore := srv.RefuseWrites(t)
		r := c.run(t, "publish", "--queue", queue, "--type", "echo")
		require.Equal(t, 1, r.code, r.stderr)
		require.Empty(t, r.stdout)
		require.Regexp(t, `^conveyor: enqueue: Redis at `+srv.URL()+` refused the write: out of memory \(maxmemory 1B, used [0-9.]+[KM]\): `+
			`.*OOM command not allowed when used memory > 'maxmemory'.*; free memory \(conveyor dead purge, a shorter worker --retention\) or raise maxmemory`, r.stderr)
		code, fs := c.doctor(t)
		require.Equal(t, 1, code)
		requireFinding(t, fs, "memory", "fail", "of maxmemory 1B")
		requireFinding(t, fs, "memory", "fail", "Redis refuses writes, publishes fail")

		// The jobs end while writes are refused; their outcomes wait in the worker and are
		// written once Redis takes writes again.
		hook.release()
		waitFor(t, 20*time.Second, 20*time.Millisecond, "the jobs to end", func() bool {
			return strings.Count(w.output.String(), "job done") >= len(ids)
		})
		for _, id := range ids {
			require.Equal(t, "in_progress", c.status(t, "--queue", queue, id).Status)
		}
		restore()
		waitFor(t, 20*time.Second, 50*time.Millisecond, "the held outcomes to be written", func() bool {
			for _, id := range ids {
				if c.status(t, "--queue", queue, id).Status != "completed" {
					return false
				}
			}
			return true
		})
		c.publishOne(t, "--queue", queue, "--type", "echo")
		require.Equal(t, 0, w.stop(t), w.output.String())
		require.Contains(t, w.output.String(), "cannot write job outcomes")
	})
}
