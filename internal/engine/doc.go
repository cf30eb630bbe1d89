// Package engine is the worker's machinery behind pipeline.Worker: the completer that writes
// outcomes in chunks, the history flusher and the histograms it counts in, the heartbeat, the
// settings watcher with its pause, levels and partition watchers, admission's lease book, and
// the registry of running jobs that cancels reach.
//
// Why a package apart. The public package pipeline should hold what users call: Client,
// Worker, Inspector, Job, options and errors. The engine is most of a worker's code, and none
// of it is API. Apart, its types stop counting as pipeline's names, and its tests run without
// the public surface. River splits its worker the same way (internal/jobcompleter,
// internal/jobexecutor, internal/maintenance).
//
// Why it imports no pipeline. The arrow points one way: pipeline builds the engine and hands it
// plain values and functions (a clock, the store, hooks on transitions). So the engine never
// sees a Job, a JobError or a WorkerHooks. Pipeline adapts those at its edge, where the public
// types live. A hook the engine calls takes what the engine has in hand (transitions and
// finish.lua's codes). Turning those into public values happens once per chunk in pipeline,
// as before, so a job costs no allocation and no Redis command more.
//
// What is still in pipeline. The run loop with its reading sessions, the middleware that
// admits a message against the lease book, and the call of the handler stay there for now.
// Their white-box tests drive them through a Worker. The next step moves the run loop here and inverts the call:
// the engine decodes a delivery and calls a function pipeline gives it, which runs the
// user's handler and classifies its result.
package engine
