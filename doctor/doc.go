// Package doctor checks that the Redis behind a Conveyor deployment is set up to keep jobs
// safe, and reads what the operator's Redis page shows.
//
// A Doctor runs over the same client and key prefix as the deployment's pipeline.Client and
// Inspector. Check answers a Report: one Finding per check (version, eviction, memory,
// persistence, cluster, clock, acl), each OK, Warn or Fail, with a one-line fix for the others.
// Info reads each server's settings and state, and what each queue takes of memory. Memory
// reads each server's eviction policy, which workers warn about at start.
//
// The checks live here, apart from package pipeline, because they are about the server rather
// than jobs: `conveyor doctor`, `conveyor redis`, GET /v1/doctor and GET /v1/redis use them.
package doctor
