// Package engine is the worker's machinery behind pipeline.Worker: the completer that writes
// outcomes in chunks, the history flusher and the histograms it counts in, the heartbeat, the
// settings watcher with its pause, levels and partition watchers, admission's lease book, the
// registry of running jobs that cancels reach, and the run loop that drives them.
//
// Why a package apart. The public package pipeline should hold what users call: Client,
// Worker, Inspector, Job, options and errors. The engine is most of a worker's code, and none
// of it is API. Apart, its types stop counting as pipeline's names, and its tests run without
// the public surface. River splits its worker the same way (internal/jobcompleter,
// internal/jobexecutor, internal/maintenance).
//
// Why it imports no pipeline. The arrow points one way: pipeline builds the engine and hands it
// plain values and functions (a clock, the store, hooks on transitions). So the engine never
// reads a Job, a JobError or a WorkerHooks (it holds the Job opaque). Pipeline adapts those at its edge, where the public
// types live. A hook the engine calls takes what the engine has in hand (transitions and
// finish.lua's codes). Turning those into public values happens once per chunk in pipeline,
// as before, so a job costs no allocation and no Redis command more.
//
// The run loop. Loop reads the queues in sessions, admits, calls and settles each message, and
// writes its outcome. What needs pipeline's public types comes in as a Handler, river's
// jobexecutor shape: Begin builds the Job, Call runs the user's handler, Classify says what its
// error asks for, End makes the JobError the middleware sees. The Attempt lives inside the Job,
// so the inversion costs no allocation.
package engine
