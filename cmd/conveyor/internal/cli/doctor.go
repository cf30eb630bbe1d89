package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/doctor"
)

func init() { addCommand(newDoctorCmd) }

// evictionTimeout bounds the start-up check of workers and serve, and the memory figures of
// an out-of-memory message.
const evictionTimeout = 3 * time.Second

func newDoctorCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check that Redis is set up to keep jobs safe, and say how to fix what is not",
		Long: `Check the Redis of --redis (each master of a cluster) for what Conveyor needs, and print one
finding per check, ok, warn or fail, with a one-line fix for the others:

  version      Redis 7.0 or later
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
			doc, err := a.doctor()
			if err != nil {
				return err
			}
			r, err := doc.Check(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), r.Findings); err != nil {
					return err
				}
			} else if err := printFindings(cmd, r.Findings); err != nil {
				return err
			}
			switch r.Failed {
			case 0:
				return nil
			case 1:
				return errors.New("1 check failed; see its fix")
			default:
				return fmt.Errorf("%d checks failed; see their fixes", r.Failed)
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as one JSON array")
	return cmd
}

// doctor returns a doctor.Doctor over the configured server: the doctor and redis commands,
// and the memory figures of workers and serve.
func (a *app) doctor() (*doctor.Doctor, error) {
	rdb, err := a.redis()
	if err != nil {
		return nil, err
	}
	return doctor.New(rdb, doctor.Config{Prefix: a.prefix})
}

func printFindings(cmd *cobra.Command, fs []doctor.Finding) error {
	tw := newTable(cmd.OutOrStdout())
	multi := slices.ContainsFunc(fs, func(f doctor.Finding) bool { return f.Node != "" })
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

// warnEviction logs one warning per server whose maxmemory-policy is not noeviction: such a
// Redis deletes keys when full, and a deleted job hash or stream is a lost job. Workers and
// serve call it at start. A Redis that does not let the user read INFO (a least-privilege ACL
// without +info, some managed services) or does not answer is noted at debug: the check is
// advice, not a condition to start.
func (a *app) warnEviction(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, evictionTimeout)
	defer cancel()
	doc, err := a.doctor()
	var nodes []doctor.NodeMemory
	if err == nil {
		nodes, err = doc.Memory(ctx)
	}
	for _, m := range nodes {
		if m.Evicts() {
			a.log.Warn().Str("redis", m.Node).Str("maxmemory_policy", m.Policy).
				Msgf("Redis evicts keys when full (maxmemory-policy %s): eviction deletes jobs; fix: %s; 'conveyor doctor' checks the rest", m.Policy, m.Fix)
		}
	}
	if err != nil {
		a.log.Debug().Err(err).Msg("cannot check Redis's maxmemory-policy (INFO memory); 'conveyor doctor' as an admin user checks it")
	}
}

// outOfMemory describes a publish that Redis refused for lack of memory, with its maxmemory
// and used memory when INFO answers.
func (a *app) outOfMemory(err error, url string) string {
	numbers := ""
	if a.rdb != nil {
		ctx, cancel := context.WithTimeout(context.Background(), evictionTimeout)
		defer cancel()
		if doc, ierr := a.doctor(); ierr == nil {
			if nodes, ierr := doc.Memory(ctx); ierr == nil && len(nodes) > 0 {
				numbers = fmt.Sprintf(" (maxmemory %s, used %s)", nodes[0].MaxMemory, nodes[0].Used)
			}
		}
	}
	return fmt.Sprintf("Redis at %s refused the write: out of memory%s: %s; free memory (conveyor dead purge, a shorter worker --retention) or raise maxmemory; 'conveyor doctor' shows the rest",
		url, numbers, strings.TrimSuffix(redisMessage(err), "."))
}
