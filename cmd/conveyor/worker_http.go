package main

import (
	"strings"

	"github.com/conveyorq/conveyor/handlers"
)

// makeGuard makes the http handler's Guard from --http-allow; a malformed entry is a usage
// error.
func (wf *workerFlags) makeGuard() error {
	g, err := handlers.NewGuard(wf.httpAllow...)
	if err != nil {
		// The Guard says "http allow ...": name the flag instead.
		return usageErrorf("--%s", strings.Replace(err.Error(), "http allow", "http-allow", 1))
	}
	wf.guard = g
	return nil
}

// handlerOptions are the ready handlers' options: with --http-allow, the http handler's client
// is the Guard's that allows those destinations; without, the handler's own guarded default.
func (wf *workerFlags) handlerOptions() handlers.Options {
	if len(wf.httpAllow) == 0 || wf.guard == nil {
		return handlers.Options{}
	}
	return handlers.Options{HTTPClient: wf.guard.Client(handlers.DefaultHTTPTimeout)}
}
