package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. It is 100 on every
// Linux ABI Go supports.
const clockTicks = 100

// procCPU returns the user plus system CPU time the process has used (all its threads), from
// /proc/<pid>/stat. Its resolution is 10 ms.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	// After "pid (comm) ": state is field 3, utime field 14, stime field 15.
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procRuntime returns the CPU time the process's live threads have run, summed from
// /proc/<pid>/task/*/schedstat (nanosecond resolution; /proc/<pid>/stat counts in 10 ms ticks,
// too coarse for short runs). Threads that already exited are not counted; Go rarely ends one.
func procRuntime(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		total += ns
	}
	return time.Duration(total), nil
}

// procStatusKB returns a kB field of /proc/<pid>/status, such as VmHWM (peak resident set).
func procStatusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// redisInfo returns the fields of one INFO section.
func redisInfo(ctx context.Context, rdb *redis.Client, section string) (map[string]string, error) {
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %w", section, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			m[k] = v
		}
	}
	return m, nil
}

// redisCPU returns used_cpu_sys + used_cpu_user of the server (all its threads).
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	m, err := redisInfo(ctx, rdb, "cpu")
	if err != nil {
		return 0, err
	}
	sys, err1 := strconv.ParseFloat(m["used_cpu_sys"], 64)
	usr, err2 := strconv.ParseFloat(m["used_cpu_user"], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("INFO cpu: no used_cpu_sys/used_cpu_user")
	}
	return time.Duration((sys + usr) * float64(time.Second)), nil
}

// usedMemory returns INFO memory used_memory in bytes.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	m, err := redisInfo(ctx, rdb, "memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(m["used_memory"], 10, 64)
}

// settledMemory reads used_memory after a short pause, so that client query buffers of the
// pipelines just sent have been released by the server's cron.
func settledMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return usedMemory(ctx, rdb)
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// machineFacts describes the machine for the report header.
type machineFacts struct {
	NProc        int    `json:"nproc"`
	GoVersion    string `json:"go"`
	RedisVersion string `json:"redis"`
	CPUModel     string `json:"cpu_model,omitempty"`
	Kernel       string `json:"kernel,omitempty"`
	// ChildBaselineRSSMB is the peak RSS of a consumer child that consumes nothing: the floor
	// under every peak_rss_mb, since every child runs this one binary.
	ChildBaselineRSSMB float64 `json:"child_baseline_rss_mb"`
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg's 1-minute load before and after the run:
	// other work on the machine (a load above nproc) makes every number noisier.
	LoadAvgStart float64 `json:"loadavg_start"`
	LoadAvgEnd   float64 `json:"loadavg_end"`
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	x, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return x
}

func readMachine(ctx context.Context, rdb *redis.Client) machineFacts {
	m := machineFacts{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg()}
	if info, err := redisInfo(ctx, rdb, "server"); err == nil {
		m.RedisVersion = info["redis_version"]
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
