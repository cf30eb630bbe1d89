// Package workflow holds the rules of a workflow's graph that need no Redis: the checks of a
// published DAG (names, bounds, dependencies, no cycle), the order its tasks are written in,
// the making of its tasks in that order (Prepare) with the options a task may not take, the
// links from each task to those that wait for it, a workflow's status from its counts, and
// its wire form (JSON). One loop over the store is here too: FollowCascade, which goes on
// with a cascade that a cancel's or a delete's script left unfinished.
//
// It sits below pipeline so that the public package keeps only its types and the publish
// itself. It works on the store's types (jobstate.NewJob, jobstate.NewTask). Its errors are
// plain: pipeline wraps them in ErrInvalid, which Prepare takes as a parameter. The transitions themselves (fan-in,
// cascades, replay) are the store's scripts (internal/jobstate, lua/workflows.lua).
package workflow
