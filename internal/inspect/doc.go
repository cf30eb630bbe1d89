// Package inspect is the machinery behind pipeline.Inspector's listing and dead-job
// administration. It pages a queue's jobs by status across partitions and priority levels
// under a byte budget, and keeps the listing cursors' format. It replays and purges dead jobs in
// chunks, previews a purge, sums a queue's stats and deletes a queue's keys in order.
//
// It works on the store's records (jobstate.Record, jobstate.Lease, jobstate.Stats), never on
// pipeline's types. So pipeline's Inspector methods check their arguments, call it and convert
// its records to Jobs in one place. The errors users test for (pipeline.ErrNotFound and the
// like) are pipeline's; the Engine takes them in its Config and wraps those very values.
//
// Why a package apart from the store: the store (internal/jobstate) is one call per Redis
// read or script, and knows no cursor or page. What is here is the plan that strings those
// calls together: a cursor over partitions and levels, the merge of their pages, the chunks
// of a replay. That plan changes with the listing, not with Redis.
package inspect
