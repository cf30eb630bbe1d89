package handlers

import (
	"maps"
	"net/http"
	"slices"

	"github.com/conveyorq/conveyor/pipeline"
)

// The job types the handlers of this package are registered under by All and Register.
const (
	TypeEcho  = "echo"
	TypeSleep = "sleep"
	TypeFail  = "fail"
	TypeFlaky = "flaky"
	TypeHTTP  = "http"
	TypeNoop  = "noop"
)

// All returns the handlers of this package by job type: echo, sleep, fail, flaky, http (with
// a shared client with a DefaultHTTPTimeout timeout) and noop. The map is new on every call;
// the caller may change it.
func All() map[string]pipeline.HandlerFunc {
	return map[string]pipeline.HandlerFunc{
		TypeEcho:  Echo,
		TypeSleep: Sleep,
		TypeFail:  Fail,
		TypeFlaky: Flaky,
		TypeHTTP:  HTTP(nil),
		TypeNoop:  Noop,
	}
}

// Registrar is what registers handlers by job type; a *pipeline.Worker is one.
type Registrar interface {
	Handle(jobType string, h pipeline.HandlerFunc)
}

// Register registers every handler of All on r, in the order of their type names.
func Register(r Registrar) { RegisterWith(r, Options{}) }

// Options configure AllWith and RegisterWith.
type Options struct {
	// HTTPClient is the client of the "http" handler (see HTTP); nil: the guarded default.
	HTTPClient *http.Client
}

// AllWith is All with the handlers configured by o.
func AllWith(o Options) map[string]pipeline.HandlerFunc {
	all := All()
	all[TypeHTTP] = HTTP(o.HTTPClient)
	return all
}

// RegisterWith registers every handler of AllWith(o) on r, in the order of their type names.
func RegisterWith(r Registrar, o Options) {
	all := AllWith(o)
	for _, name := range slices.Sorted(maps.Keys(all)) {
		r.Handle(name, all[name])
	}
}
