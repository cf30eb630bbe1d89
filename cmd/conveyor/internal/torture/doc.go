// Package torture is the torture suite behind `conveyor torture`: named scenarios that run a
// workload on real processes on loopback (a redis-server of the run's own with an AOF fsynced
// on every write, worker processes that are the conveyor binary itself, a producer in this
// process, a fault-injecting proxy between them) while nemeses (kill-worker, stop-worker,
// term-worker, redis-restart, redis-stop, proxy-reset, script-flush) strike on a seeded
// schedule, and then check what happened against a ledger kept apart from the system under
// test.
//
// The ledger is append-only JSON lines, one file per process (ledger.go): the producer records
// each acknowledged publish, the workers' torture handler records each attempt it starts and
// finishes, and their Attempts hook each outcome Redis stored; at the end the producer
// records what it reads of every job. Check (check.go) classifies every job from it alone,
// plus the end state of Redis (pending entries, gauges, the dead set, the keys):
//
//   - ok: one committed outcome, the one the workload designed;
//   - lost: acknowledged and never committed (not in a final state at the end);
//   - duplicate commit: two final outcomes stored for one job (fencing failed);
//   - duplicate execution: more handler starts than the job's design needs; allowed up to
//     the stated bound (faults x processes each can cut short x concurrency);
//   - unexpected: a job the handlers ran or committed that no publish was acknowledged for
//     (among them a second job made for a unique key held by the first);
//   - early: a delayed job started before its due time, less ClockSkew.
//
// Scenarios are a table (scenarios.go): a name, its nemeses and its short and long sizes. A
// cluster slot migration, a Sentinel failover or a clock nemesis is one more nemesis in
// nemesis.go and, when it needs another topology, one more kind of Redis in run.go.
//
// A scenario's Topology says which Redis it runs on (topology.go): one redis-server, or a
// Redis Cluster of 3 masters with a replica each (redisproc.StartCluster), which the workers
// reach with --cluster and the producer with a cluster client publishing durably (WAIT for one
// replica, so that a failover loses no acknowledged job), and whose end state is read from
// every master. The cluster nemeses (slot-move, replica-promote, master-kill) strike the
// queue's slot and its master; CheckTopology refuses those a topology cannot take.
//
// A Sentinel set (TopologySentinel, sentinel.go: a master, one replica and three sentinels,
// redisproc.StartSentinel) is reached by the workers with a Sentinel URL and by the producer
// and the checks with failover clients; the producer publishes durably there too. Its nemeses
// fail the master over: sentinel-failover coordinated (writes paused until the replica has
// them), sentinel-master-kill by SIGKILL, the killed node restarted and rejoining as a replica.
package torture
