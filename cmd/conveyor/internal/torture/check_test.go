package torture

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Synthetic ledgers, one per class of job, each checked for its count and for the violation
// it makes (or does not make).
func TestCheck(t *testing.T) {
	const due = 1_790_000_000_000 // ms
	ack := func(id string) Record { return Record{Kind: Ack, ID: id, Expect: "completed", Need: 1, At: 1} }
	start := func(id string, attempt, pid int, atMS int64) Record {
		return Record{Kind: Start, ID: id, Attempt: attempt, PID: pid, At: atMS * 1000}
	}
	commit := func(id, outcome string, attempt, pid int) Record {
		return Record{Kind: Commit, ID: id, Attempt: attempt, PID: pid, Outcome: outcome}
	}
	observed := func(id, status string) Record { return Record{Kind: Observed, ID: id, Outcome: status} }
	clean := EndState{}
	cases := []struct {
		name      string
		recs      []Record
		end       EndState
		bound     int
		check     func(t *testing.T, r Report)
		violation string // a substring of the one violation expected; "" for none
	}{
		{
			name: "ok",
			recs: []Record{ack("a"), start("a", 1, 10, 5), commit("a", "completed", 1, 10), observed("a", "completed")},
			end:  clean,
			check: func(t *testing.T, r Report) {
				require.Equal(t, 1, r.OK)
				require.Zero(t, r.Unwitnessed)
			},
		},
		{
			name:  "ok without a commit record (worker killed after its write)",
			recs:  []Record{ack("a"), start("a", 1, 10, 5), observed("a", "completed")},
			check: func(t *testing.T, r Report) { require.Equal(t, 1, r.OK); require.Equal(t, 1, r.Unwitnessed) },
		},
		{
			name:      "lost: acknowledged, never committed",
			recs:      []Record{ack("a"), start("a", 1, 10, 5), observed("a", "missing")},
			check:     func(t *testing.T, r Report) { require.Equal(t, []string{"a"}, r.Lost) },
			violation: "1 lost (acknowledged, never committed): a (observed missing, 1 starts)",
		},
		{
			name:      "lost: left queued",
			recs:      []Record{ack("a"), observed("a", "queued")},
			check:     func(t *testing.T, r Report) { require.Equal(t, []string{"a"}, r.Lost) },
			violation: "1 lost",
		},
		{
			name: "duplicate commit",
			recs: []Record{ack("a"), start("a", 1, 10, 5), start("a", 2, 11, 6),
				commit("a", "completed", 1, 10), commit("a", "completed", 2, 11), observed("a", "completed")},
			bound:     4,
			check:     func(t *testing.T, r Report) { require.Equal(t, []string{"a"}, r.DuplicateCommits) },
			violation: "1 committed twice: a (completed@1 by pid 10, completed@2 by pid 11)",
		},
		{
			name: "retries then completion is one commit",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 2}, start("a", 1, 10, 5), commit("a", "retry", 1, 10),
				start("a", 2, 10, 6), commit("a", "completed", 2, 10), observed("a", "completed")},
			check: func(t *testing.T, r Report) { require.Equal(t, 1, r.OK); require.Empty(t, r.DuplicateCommits) },
		},
		{
			name: "duplicate executions within the bound",
			recs: []Record{ack("a"), start("a", 1, 10, 5), start("a", 2, 11, 6), start("a", 3, 12, 7),
				commit("a", "completed", 3, 12), observed("a", "completed")},
			bound: 2,
			check: func(t *testing.T, r Report) {
				require.Equal(t, 2, r.DuplicateExecutions)
				require.Equal(t, 1, r.OK, "a re-execution within the bound is no fault of the job")
			},
		},
		{
			name: "duplicate executions over the bound",
			recs: []Record{ack("a"), start("a", 1, 10, 5), start("a", 2, 11, 6), start("a", 3, 12, 7),
				commit("a", "completed", 3, 12), observed("a", "completed")},
			bound:     1,
			violation: "2 duplicate executions, over the bound of 1: a",
		},
		{
			name: "a designed retry is no duplicate execution",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 3}, start("a", 1, 10, 5), start("a", 2, 10, 6),
				start("a", 3, 10, 7), commit("a", "completed", 3, 10), observed("a", "completed")},
			check: func(t *testing.T, r Report) { require.Zero(t, r.DuplicateExecutions) },
		},
		{
			name: "unexpected: run but never published",
			recs: []Record{start("ghost", 1, 10, 5), commit("ghost", "completed", 1, 10)},
			check: func(t *testing.T, r Report) {
				require.Equal(t, []string{"ghost"}, r.Unexpected)
				require.Zero(t, r.Jobs)
			},
			violation: "1 unexpected (run or committed, never published): ghost",
		},
		{
			name:  "indeterminate publish that ran is not unexpected",
			recs:  []Record{{Kind: Indeterminate, ID: "maybe"}, start("maybe", 1, 10, 5), commit("maybe", "completed", 1, 10)},
			check: func(t *testing.T, r Report) { require.Equal(t, 1, r.Indeterminate); require.Empty(t, r.Unexpected) },
		},
		{
			name: "early: started before its due time",
			recs: []Record{{Kind: Ack, ID: "d", Due: due, Expect: "completed", Need: 1}, start("d", 1, 10, due-ClockSkew-1),
				commit("d", "completed", 1, 10), observed("d", "completed")},
			check:     func(t *testing.T, r Report) { require.Equal(t, []string{"d"}, r.Early) },
			violation: "1 started early",
		},
		{
			name: "on time within the clock skew",
			recs: []Record{{Kind: Ack, ID: "d", Due: due, Expect: "completed", Need: 1}, start("d", 1, 10, due-ClockSkew),
				commit("d", "completed", 1, 10), observed("d", "completed")},
			check: func(t *testing.T, r Report) { require.Empty(t, r.Early); require.Equal(t, 1, r.OK) },
		},
		{
			name: "designed to fail, dead as expected",
			recs: []Record{{Kind: Ack, ID: "x", Expect: "failed", Need: 2}, start("x", 1, 10, 5), start("x", 2, 10, 6),
				commit("x", "retry", 1, 10), commit("x", "dead", 2, 10), observed("x", "failed")},
			end:   EndState{Dead: []string{"x"}},
			check: func(t *testing.T, r Report) { require.Equal(t, 1, r.OK) },
		},
		{
			name:      "wrong outcome: completed a job designed to fail",
			recs:      []Record{{Kind: Ack, ID: "x", Expect: "failed", Need: 2}, observed("x", "completed")},
			end:       EndState{Dead: []string{"x"}},
			violation: "1 ended otherwise than designed: x (completed, want failed)",
		},
		{
			name:      "dead set: an unexpected member",
			recs:      []Record{ack("a"), observed("a", "completed")},
			end:       EndState{Dead: []string{"zzz"}},
			violation: "the dead set is not the expected one: 1 there unexpectedly zzz, 0 expected missing",
		},
		{
			name:      "dead set: an expected member missing",
			recs:      []Record{{Kind: Ack, ID: "x", Expect: "failed", Need: 2}, observed("x", "failed")},
			violation: "0 there unexpectedly , 1 expected missing x",
		},
		{
			name:      "pending entries left",
			recs:      []Record{ack("a"), observed("a", "completed")},
			end:       EndState{Pending: 3},
			violation: "3 entries still pending at the end",
		},
		{
			name:      "jobs left over",
			recs:      []Record{ack("a"), observed("a", "completed")},
			end:       EndState{Queued: 1, InProgress: 2, Scheduled: 3},
			violation: "jobs left over at the end: 1 queued, 2 in progress, 3 scheduled",
		},
		{
			name:      "unique keys left held",
			recs:      []Record{ack("a"), observed("a", "completed")},
			end:       EndState{UniqueKeys: 2},
			violation: "2 unique keys still held at the end",
		},
		{
			name:      "keys over the bound",
			recs:      []Record{ack("a"), observed("a", "completed")},
			end:       EndState{Keys: 50, KeyBound: 41},
			violation: "50 keys at the end, over the bound of 41",
		},
		{
			name: "the handler was handed the payload published",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 1, Sum: "s1"}, {Kind: Start, ID: "a", Attempt: 1, PID: 10, At: 5, Sum: "s1"},
				commit("a", "completed", 1, 10), observed("a", "completed")},
			check: func(t *testing.T, r Report) { require.Equal(t, 1, r.OK); require.Empty(t, r.Garbled) },
		},
		{
			name: "garbled: a handler handed another payload (ciphertext, say)",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 2, Sum: "s1"}, {Kind: Start, ID: "a", Attempt: 1, PID: 10, At: 5, Sum: "s1"},
				{Kind: Start, ID: "a", Attempt: 2, PID: 10, At: 6, Sum: "zz"}, commit("a", "completed", 2, 10), observed("a", "completed")},
			check:     func(t *testing.T, r Report) { require.Equal(t, []string{"a"}, r.Garbled); require.Zero(t, r.OK) },
			violation: "1 handed a payload other than the one published: a (published s1, handed 1:s1, 2:zz)",
		},
		{
			name: "sealed: payload and result under the new key, opening to what was published",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 1, Sum: "s1"}, {Kind: Start, ID: "a", Attempt: 1, PID: 10, At: 5, Sum: "s1"},
				commit("a", "completed", 1, 10),
				{Kind: Observed, ID: "a", Outcome: "completed", Key: "k2", Sum: "s1", ResultKey: "k2", ResultSum: "s1"},
				{Kind: Ack, ID: "x", Expect: "failed", Need: 2, Sum: "s2"}, {Kind: Observed, ID: "x", Outcome: "failed", Key: "k2", Sum: "s2"}},
			end:   EndState{SealKey: "k2", Dead: []string{"x"}},
			check: func(t *testing.T, r Report) { require.Equal(t, 2, r.OK); require.Empty(t, r.Unsealed) },
		},
		{
			name: "unsealed: a payload left under the old key",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 1, Sum: "s1"},
				{Kind: Observed, ID: "a", Outcome: "completed", Key: "k1", ResultKey: "k2", ResultSum: "s1"}},
			end:       EndState{SealKey: "k2"},
			check:     func(t *testing.T, r Report) { require.Equal(t, []string{"a"}, r.Unsealed) },
			violation: "1 stored otherwise than under key k2: a (completed: payload under k1 opening to nothing, result under k2 opening to s1; published s1)",
		},
		{
			name: "unsealed: a completed job without its result",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 1, Sum: "s1"},
				{Kind: Observed, ID: "a", Outcome: "completed", Key: "k2", Sum: "s1"}},
			end:       EndState{SealKey: "k2"},
			violation: "1 stored otherwise than under key k2: a (completed: payload under k2 opening to s1, result under nothing",
		},
		{
			name: "unsealed: a payload stored plain",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 1, Sum: "s1"},
				{Kind: Observed, ID: "a", Outcome: "completed", Key: "plain", Sum: "s1", ResultKey: "k2", ResultSum: "s1"}},
			end:       EndState{SealKey: "k2"},
			violation: "payload under plain opening to s1",
		},
		{
			name: "unsealed: opens under the new key to another payload",
			recs: []Record{{Kind: Ack, ID: "a", Expect: "completed", Need: 1, Sum: "s1"},
				{Kind: Observed, ID: "a", Outcome: "completed", Key: "k2", Sum: "zz", ResultKey: "k2", ResultSum: "zz"}},
			end:       EndState{SealKey: "k2"},
			violation: "payload under k2 opening to zz",
		},
		{
			name:      "sealing: values of Redis under another key",
			recs:      []Record{ack("a"), observed("a", "completed")},
			end:       EndState{Sealing: []string{"2 values sealed under k1, not k2, in 1 keys: conveyor:{torture}:job:a"}},
			violation: "sealing: 2 values sealed under k1, not k2",
		},
		{
			name:      "leaked goroutines",
			recs:      []Record{ack("a"), observed("a", "completed")},
			end:       EndState{Goroutines: []string{"w3: 90 goroutines, a fresh worker has 40"}},
			violation: "goroutines: w3: 90",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.recs, c.end, c.bound)
			if c.check != nil {
				c.check(t, r)
			}
			if c.violation == "" {
				require.Empty(t, r.Violations)
				require.False(t, r.Failed())
				return
			}
			require.Len(t, r.Violations, 1, "%q", r.Violations)
			require.Contains(t, r.Violations[0], c.violation)
			require.True(t, r.Failed())
		})
	}
}

// A report names at most ten jobs of a class, and how many more there are.
func TestCheckNamesTenJobs(t *testing.T) {
	var recs []Record
	for i := range 12 {
		id := "j" + string(rune('a'+i))
		recs = append(recs, Record{Kind: Ack, ID: id, Expect: "completed", Need: 1}, Record{Kind: Observed, ID: id, Outcome: "missing"})
	}
	r := Check(recs, EndState{}, 0)
	require.Len(t, r.Lost, 12)
	require.Len(t, r.Violations, 1)
	require.True(t, strings.HasSuffix(r.Violations[0], "and 2 more"), r.Violations[0])
}

// The history's keys grow with the run's length, to their spans, never with its jobs.
func TestHistoryKeys(t *testing.T) {
	require.EqualValues(t, 2*((0+2)+(0+2)), HistoryKeys(0))
	require.EqualValues(t, 2*((24+2)+(2+2)), HistoryKeys(2*time.Minute))
	require.EqualValues(t, 2*((720+2)+(1440+2)), HistoryKeys(48*time.Hour))
}

// The flow-control check: attempts of LimitedType overlapping in the ledger, against the
// limit, with an attempt cut short ending at its job's next start.
func TestCheckConcurrencyLimit(t *testing.T) {
	ack := func(id string) Record {
		return Record{Kind: Ack, ID: id, Expect: "completed", Need: 1, Type: LimitedType, At: 1}
	}
	start := func(id string, attempt, pid int, atMS int64) Record {
		return Record{Kind: Start, ID: id, Attempt: attempt, PID: pid, At: atMS * 1000}
	}
	finish := func(id string, attempt, pid int, atMS int64) Record {
		return Record{Kind: Finish, ID: id, Attempt: attempt, PID: pid, At: atMS * 1000, Outcome: "ok"}
	}
	done := func(id string) []Record {
		return []Record{{Kind: Commit, ID: id, Attempt: 1, PID: 1, Outcome: "completed"}, {Kind: Observed, ID: id, Outcome: "completed"}}
	}
	job := func(id string, recs ...Record) []Record {
		return append(append([]Record{ack(id)}, recs...), done(id)...)
	}
	signal := func(kind Kind, pid int, atMS int64, held string) Record {
		return Record{Kind: kind, ID: fmt.Sprintf("w%d", pid), PID: pid, At: atMS * 1000, Outcome: held}
	}
	kill := func(pid int, atMS int64, held string) Record { return signal(Kill, pid, atMS, held) }
	stop := func(pid int, atMS int64, held string) Record { return signal(Stop, pid, atMS, held) }
	cont := func(pid int, atMS int64) Record { return signal(Cont, pid, atMS, "") }
	lost := func(pid int, atMS int64) Record { return signal(LeaseLost, pid, atMS, "") }
	cases := []struct {
		name      string
		recs      [][]Record
		most      int
		violation string
	}{
		{name: "two at once, then a third after one finished", most: 2, recs: [][]Record{
			job("a", start("a", 1, 1, 0), finish("a", 1, 1, 10)),
			job("b", start("b", 1, 2, 5), finish("b", 1, 2, 20)),
			job("c", start("c", 1, 1, 10), finish("c", 1, 1, 30)),
		}},
		{name: "three at once", most: 3, violation: "3 attempts of torture-limited ran at once (limit 2) at 8000 µs: a@1, b@1, c@1", recs: [][]Record{
			job("a", start("a", 1, 1, 0), finish("a", 1, 1, 10)),
			job("b", start("b", 1, 2, 5), finish("b", 1, 2, 20)),
			job("c", start("c", 1, 3, 8), finish("c", 1, 3, 30)),
		}},
		{name: "a killed attempt ends at its job's next start", most: 2, recs: [][]Record{
			job("a", start("a", 1, 1, 0), start("a", 2, 2, 50), finish("a", 2, 2, 60)),
			job("b", start("b", 1, 3, 5), finish("b", 1, 3, 20)),
			job("c", start("c", 1, 3, 20), finish("c", 1, 3, 40)),
		}},
		{name: "a killed attempt holds its slot until then", most: 3, violation: "3 attempts", recs: [][]Record{
			job("a", start("a", 1, 1, 0), start("a", 2, 2, 50), finish("a", 2, 2, 60)),
			job("b", start("b", 1, 3, 5), finish("b", 1, 3, 20)),
			job("c", start("c", 1, 4, 10), finish("c", 1, 4, 40)),
		}},
		{name: "a stopped worker's late attempt stops counting at the next start", most: 1, recs: [][]Record{
			job("a", start("a", 1, 1, 0), start("a", 2, 2, 50), finish("a", 2, 2, 60), finish("a", 1, 1, 100)),
			job("b", start("b", 1, 3, 70), finish("b", 1, 3, 90)),
		}},
		// As seen in a run: a stopped worker's two attempts and a killed one, whose jobs waited
		// long for their next start; their slots came back with their leases.
		{name: "a stopped or killed worker's slots come back with its lease", most: 2, recs: [][]Record{
			{stop(1, 1500, "held"), cont(1, 3500), lost(1, 3600), kill(4, 4100, "held")},
			job("a", start("a", 1, 1, 0), finish("a", 1, 1, 2900), start("a", 2, 2, 9000), finish("a", 2, 2, 9010)),
			job("b", start("b", 1, 1, 1), finish("b", 1, 1, 2900)),
			job("d", start("d", 1, 3, 2101), finish("d", 1, 3, 2110)),
			job("e", start("e", 1, 3, 2102), finish("e", 1, 3, 2120)),
			job("c", start("c", 1, 4, 2150), start("c", 2, 2, 9100), finish("c", 2, 2, 9110)),
			job("f", start("f", 1, 3, 4150), finish("f", 1, 3, 4200)),
			job("g", start("g", 1, 3, 4160), finish("g", 1, 3, 4300)),
		}},
		{name: "a stopped worker's attempts count until its stop", most: 3, violation: "3 attempts", recs: [][]Record{
			{stop(1, 2000, "held"), cont(1, 5000)},
			job("a", start("a", 1, 1, 0), finish("a", 1, 1, 2900), start("a", 2, 2, 9000), finish("a", 2, 2, 9010)),
			job("b", start("b", 1, 1, 1), finish("b", 1, 1, 2900)),
			job("d", start("d", 1, 3, 1999), finish("d", 1, 3, 2110)),
		}},
		// As seen in CI under load: two attempts admitted from memory after their worker's
		// last renewal (at 0), then the worker was killed. Its slots came back at 2000, before
		// start + lease, and two attempts ran elsewhere.
		{name: "a killed worker's attempts end at its kill", most: 2, recs: [][]Record{
			{kill(1, 300, "held")},
			job("a", start("a", 1, 1, 100), start("a", 2, 3, 2500), finish("a", 2, 3, 2520)),
			job("b", start("b", 1, 1, 150), start("b", 2, 3, 2530), finish("b", 2, 3, 2550)),
			job("c", start("c", 1, 3, 2050), finish("c", 1, 3, 2080)),
			job("d", start("d", 1, 3, 2060), finish("d", 1, 3, 2080)),
		}},
		{name: "a killed worker's attempt counts until its kill", most: 3, violation: "3 attempts", recs: [][]Record{
			{kill(1, 4000, "held")},
			job("a", start("a", 1, 1, 0), start("a", 2, 3, 6500), finish("a", 2, 3, 6520)),
			job("c", start("c", 1, 3, 3000), finish("c", 1, 3, 3100)),
			job("d", start("d", 1, 3, 3050), finish("d", 1, 3, 3100)),
		}},
		{name: "a killed worker whose lease was gone is excused", most: 2, recs: [][]Record{
			{kill(1, 4000, "gone")},
			job("a", start("a", 1, 1, 0), start("a", 2, 3, 6500), finish("a", 2, 3, 6520)),
			job("c", start("c", 1, 3, 3000), finish("c", 1, 3, 3100)),
			job("d", start("d", 1, 3, 3050), finish("d", 1, 3, 3100)),
		}},
		// Alive and renewing, its slot is held until the finish: no lease bounds it.
		{name: "a live worker's long attempt counts until its finish", most: 3, violation: "3 attempts", recs: [][]Record{
			job("a", start("a", 1, 1, 0), finish("a", 1, 1, 5000)),
			job("c", start("c", 1, 3, 3000), finish("c", 1, 3, 3100)),
			job("d", start("d", 1, 3, 3050), finish("d", 1, 3, 3100)),
		}},
		// Its keeper starved past the lease: the slot went at 2000 (last renewal at 0), the
		// handler went on. The worker said so at its next call.
		{name: "a worker that logged its lease ran out is excused before", most: 2, recs: [][]Record{
			{lost(1, 2900)},
			job("a", start("a", 1, 1, 500), finish("a", 1, 1, 3000)),
			job("c", start("c", 1, 3, 2100), finish("c", 1, 3, 2200)),
			job("d", start("d", 1, 3, 2150), finish("d", 1, 3, 2200)),
		}},
		{name: "and counts after", most: 3, violation: "3 attempts", recs: [][]Record{
			{lost(1, 2900)},
			job("a", start("a", 1, 1, 3000), finish("a", 1, 1, 3300)),
			job("c", start("c", 1, 3, 3100), finish("c", 1, 3, 3200)),
			job("d", start("d", 1, 3, 3150), finish("d", 1, 3, 3200)),
		}},
		// After a stop past the lease, a worker admits from slots it no longer holds until its
		// next call tells it. A warning logged before it froze voids the lease read then.
		{name: "a stopped worker is excused from its stop until its warning", most: 2, recs: [][]Record{
			{stop(1, 1000, "held"), cont(1, 4000), lost(1, 4200), stop(5, 2000, "held"), lost(5, 2050), cont(5, 4000)},
			job("a", start("a", 1, 1, 4010), finish("a", 1, 1, 4100)),
			job("b", start("b", 1, 5, 0), finish("b", 1, 5, 5000)),
			job("c", start("c", 1, 3, 4020), finish("c", 1, 3, 4090)),
			job("d", start("d", 1, 3, 4030), finish("d", 1, 3, 4090)),
		}},
		{name: "and counts after it", most: 3, violation: "3 attempts", recs: [][]Record{
			{stop(1, 1000, "held"), cont(1, 4000), lost(1, 4200)},
			job("a", start("a", 1, 1, 4300), finish("a", 1, 1, 4400)),
			job("c", start("c", 1, 3, 4310), finish("c", 1, 3, 4390)),
			job("d", start("d", 1, 3, 4320), finish("d", 1, 3, 4390)),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var recs []Record
			for _, r := range tc.recs {
				recs = append(recs, r...)
			}
			rep := Check(recs, EndState{ConcurrencyLimit: LimitConcurrency}, 10)
			require.Equal(t, tc.most, rep.MaxConcurrent)
			if tc.violation == "" {
				require.Empty(t, rep.Violations)
				return
			}
			require.Len(t, rep.Violations, 1)
			require.Contains(t, rep.Violations[0], tc.violation)
		})
	}
}

// The workflow checks: a task's starts against its dependencies' finish records, a Finally
// task against their final ones, a task canceled by design that ran, and the end status.
func TestCheckWorkflows(t *testing.T) {
	ack := func(id, expect string, need int, finally bool, after ...string) Record {
		return Record{Kind: Ack, ID: id, Expect: expect, Need: need, At: 1, After: after, Finally: finally}
	}
	start := func(id string, attempt int, atMS int64) Record {
		return Record{Kind: Start, ID: id, Attempt: attempt, PID: 1, At: atMS * 1000}
	}
	finish := func(id string, attempt int, atMS int64, outcome string) Record {
		return Record{Kind: Finish, ID: id, Attempt: attempt, PID: 1, At: atMS * 1000, Outcome: outcome}
	}
	ended := func(id, commit, status string, attempt int) []Record {
		return []Record{{Kind: Commit, ID: id, Attempt: attempt, PID: 1, Outcome: commit}, {Kind: Observed, ID: id, Outcome: status}}
	}
	ran := func(id string, s, f int64) []Record {
		return append([]Record{start(id, 1, s), finish(id, 1, f, "ok")}, ended(id, "completed", "completed", 1)...)
	}
	died := func(id string, s int64) []Record {
		return append([]Record{start(id, 1, s), finish(id, 1, s+1, "error"), start(id, 2, s+2), finish(id, 2, s+3, "error")},
			ended(id, "dead", "failed", 2)...)
	}
	cases := []struct {
		name      string
		recs      [][]Record
		end       EndState
		violation string
	}{
		{name: "a diamond in order", recs: [][]Record{
			{ack("w.a", "completed", 1, false)}, ran("w.a", 0, 10),
			{ack("w.b", "completed", 1, false, "w.a")}, ran("w.b", 11, 20),
			{ack("w.c", "completed", 1, false, "w.a")}, ran("w.c", 12, 30),
			{ack("w.d", "completed", 1, false, "w.b", "w.c")}, ran("w.d", 31, 40),
		}},
		{name: "a join started before a dependency finished", violation: "1 workflow tasks started before their dependencies ended: w.d@1 at 25000 µs (w.c final at 30000 µs)", recs: [][]Record{
			{ack("w.b", "completed", 1, false)}, ran("w.b", 11, 20),
			{ack("w.c", "completed", 1, false)}, ran("w.c", 12, 30),
			{ack("w.d", "completed", 1, false, "w.b", "w.c")}, ran("w.d", 25, 40),
		}},
		{name: "a task run though its dependency died", violation: "w.d@1 (w.b never finished)", recs: [][]Record{
			{ack("w.b", "failed", 2, false)}, died("w.b", 0),
			{ack("w.d", "completed", 1, false, "w.b")}, ran("w.d", 25, 40),
		}, end: EndState{Dead: []string{"w.b"}}},
		{name: "a canceled dependent and a callback after the dead member", recs: [][]Record{
			{ack("w.b", "failed", 2, false)}, died("w.b", 0),
			{ack("w.d", "canceled", 1, false, "w.b"), {Kind: Observed, ID: "w.d", Outcome: "canceled"}},
			{ack("w.callback", "completed", 1, true, "w.b", "w.d")}, ran("w.callback", 4, 10),
		}, end: EndState{Dead: []string{"w.b"}}},
		{name: "a callback before the dead member's last attempt", violation: "w.callback@1 at 2000 µs (w.b final at 3000 µs)", recs: [][]Record{
			{ack("w.b", "failed", 2, false)}, died("w.b", 0),
			{ack("w.callback", "completed", 1, true, "w.b")}, ran("w.callback", 2, 10),
		}, end: EndState{Dead: []string{"w.b"}}},
		{name: "a task canceled by design that ran", violation: "1 ended otherwise than designed", recs: [][]Record{
			{ack("w.d", "canceled", 1, false), start("w.d", 1, 3), {Kind: Observed, ID: "w.d", Outcome: "canceled"}},
		}},
		{name: "a workflow's end status", violation: "workflow: w ended running, designed to end completed",
			end: EndState{Workflows: []string{"w ended running, designed to end completed"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var recs []Record
			for _, r := range tc.recs {
				recs = append(recs, r...)
			}
			rep := Check(recs, tc.end, 10)
			if tc.violation == "" {
				require.Empty(t, rep.Violations)
				return
			}
			require.Len(t, rep.Violations, 1, "%q", rep.Violations)
			require.Contains(t, rep.Violations[0], tc.violation)
		})
	}
}
