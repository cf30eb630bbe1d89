// Package torture is the torture suite behind `conveyor torture`. Named scenarios run a
// workload on real processes on loopback while nemeses strike on a seeded schedule. Then the
// suite checks the outcome against a ledger kept apart from the system under test.
//
// # Processes and nemeses
//
// A run has a redis-server of its own. Its AOF is fsynced on every write. Its worker
// processes are the conveyor binary itself. Its producer runs in this process. A
// fault-injecting proxy sits between them. The nemeses include kill-worker, stop-worker,
// term-worker, redis-restart, redis-stop, proxy-reset and script-flush.
//
// # Ledger
//
// The ledger is append-only JSON lines, one file per process (ledger.go). The producer
// records each acknowledged publish. The workers' torture handler records each attempt it
// starts and finishes. Their Attempts hook records each outcome Redis stored. At the end the
// producer records what it reads of every job.
//
// # Check
//
// Check (check.go) classifies every job from the ledger alone, plus the end state of Redis.
// That state is the pending entries, the gauges, the dead set and the keys. The classes
// follow.
//
// Ok: one committed outcome, the one the workload designed.
//
// Lost: acknowledged and never committed (not in a final state at the end).
//
// Duplicate commit: two final outcomes stored for one job (fencing failed).
//
// Duplicate execution: more handler starts than the job's design needs. It is allowed up to
// the stated bound: faults x processes each can cut short x concurrency.
//
// Unexpected: a job the handlers ran or committed that no publish was acknowledged for.
// Among them is a second job made for a unique key held by the first.
//
// Early: a delayed job started before its due time, less ClockSkew.
//
// Garbled: a handler was handed a payload other than the one published. The producer's ack
// and the handler's start records carry the payload's Digest.
//
// Unsealed (the encryption workload): a job whose stored payload or result is not under the
// new key at the end, or does not open with it alone to what was published.
//
// # Encryption
//
// The encryption workload (Workload.Encryption, encryption.go) seals payloads and results and
// rotates the key under load, as an operator would. The producer and the workers start with
// a key file listing OldKey ($CONVEYOR_KEYS). At an eighth of the run the runner lists NewKey
// first: it restarts the workers one at a time with the new file, then switches the producer.
// Then it runs the binary's `keys rotate` again and again until the nemeses stop, and once
// more after the drain until it reports nothing left. The end state reads every job with
// NewKey alone, and scans every value of Redis for one under OldKey or a plain payload. The
// workload takes any topology: encryption-mixed runs it on one server, cluster-encryption on
// a cluster (keys rotate --cluster; the scan goes over every master).
//
// # Scenarios
//
// Scenarios are a table (scenarios.go): a name, its nemeses and its short and long sizes. A
// cluster slot migration, a Sentinel failover or a clock nemesis is one more nemesis in
// nemesis.go. When it needs another topology, it is also one more kind of Redis in run.go.
//
// # Topologies
//
// A scenario's Topology says which Redis it runs on (topology.go). It is one redis-server, or
// a Redis Cluster of 3 masters with a replica each (redisproc.StartCluster). The workers reach
// a cluster with --cluster. The producer reaches it with a cluster client publishing durably:
// it waits (WAIT) for one replica, so that a failover loses no acknowledged job. The end state
// is read from every master. The cluster nemeses (slot-move, replica-promote, master-kill)
// strike the queue's slot and its master. CheckTopology refuses those a topology cannot take.
//
// A Sentinel set is TopologySentinel (sentinel.go, redisproc.StartSentinel). It has a master,
// one replica and three sentinels. The workers reach it with a Sentinel URL. The producer and
// the checks reach it with failover clients, and the producer publishes durably there too.
// Its nemeses fail the master over. In sentinel-failover it is coordinated: writes are paused
// until the replica has them. In sentinel-master-kill the master gets SIGKILL. The killed node
// restarts and rejoins as a replica.
package torture
