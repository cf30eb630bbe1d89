package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/doctor"
)

func init() { addCommand(newRedisCmd) }

func newRedisCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "redis [--json]",
		Short: "Show Redis's state and how much memory each queue takes",
		Long: `Show each Redis server's state (each master of a cluster): version, uptime, memory used and
maxmemory, eviction policy, clients and maxclients, persistence (AOF and its fsync, the last RDB
snapshot); and, per known queue, the bytes it takes: its keys (streams, scheduled and dead sets,
stats) by MEMORY USAGE SAMPLES 5, which estimates a big stream or set from 5 of its elements
so a large queue costs Redis what a small one does, plus an estimate of its job records (its
scheduled, queued, running and dead jobs times the mean size of at most 5 sampled records a
partition; finished records kept for their retention are not counted). The dashboard's Redis
page shows the same; 'conveyor doctor' says what to fix. With --json it prints
{"nodes": [...], "queues": [...]} as GET /v1/redis does (without its doctor).`,
		Example: `  conveyor redis
  conveyor redis --json | jq '.queues | sort_by(-.bytes) | .[0]'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc, err := a.doctor()
			if err != nil {
				return err
			}
			info, err := doc.Info(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, info)
			}
			return printRedisInfo(a.stdout, info)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"nodes": [...], "queues": [...]}`)
	return cmd
}

// printRedisInfo writes one block per server, then a table of the queues' memory.
func printRedisInfo(w io.Writer, info *doctor.Info) error {
	for _, n := range info.Nodes {
		t := newTable(w)
		fmt.Fprintf(t, "server:\t%s\n", orDash(n.Node))
		if n.Error != "" {
			fmt.Fprintf(t, "error:\t%s\n", n.Error)
		}
		maxMem := "no limit"
		if n.MaxMemory > 0 {
			maxMem = bytesText(n.MaxMemory)
		}
		aof := "off"
		if n.AOF {
			aof = "on, appendfsync " + orDash(n.AppendFsync)
		}
		fmt.Fprintf(t, "version:\t%s (%s)\n", n.Version, n.Mode)
		fmt.Fprintf(t, "uptime:\t%s\n", (time.Duration(n.UptimeSeconds) * time.Second).String())
		fmt.Fprintf(t, "memory:\t%s used of %s\n", bytesText(n.UsedMemory), maxMem)
		fmt.Fprintf(t, "eviction:\t%s\n", n.EvictionPolicy)
		fmt.Fprintf(t, "clients:\t%d of %d\n", n.ConnectedClients, n.MaxClients)
		fmt.Fprintf(t, "aof:\t%s\n", aof)
		var saved time.Time
		if n.RDBLastSave > 0 {
			saved = time.Unix(n.RDBLastSave, 0)
		}
		fmt.Fprintf(t, "rdb:\tlast save %s (%s), %d writes since\n",
			tableTime(saved), orDash(n.RDBLastSaveStatus), n.RDBChangesSinceSave)
		if err := t.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if len(info.Queues) == 0 {
		_, err := fmt.Fprintln(w, "no queues yet")
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "QUEUE\tBYTES\tKEYS\tRECORDS\tJOBS\tSAMPLED")
	for _, q := range info.Queues {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d\t%d\n", q.Queue, bytesText(q.Bytes), bytesText(q.Keys), bytesText(q.Records), q.Jobs, q.Sampled)
	}
	return t.Flush()
}

// bytesText is a byte count in binary units: 512 B, 1.5 KiB, 20 MiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i-1])
}
