package cli

import (
	"strings"

	"github.com/rs/zerolog"

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

// handlerOptions are the ready handlers' options: the http handler's client is the Guard's
// (allowing the --http-allow destinations), which logs its refusals to log.
func (wf *workerFlags) handlerOptions(log zerolog.Logger) handlers.Options {
	if wf.guard == nil {
		return handlers.Options{}
	}
	return handlers.Options{HTTPClient: wf.guard.WithLogger(log).Client(handlers.DefaultHTTPTimeout)}
}
