package handlers

import (
	"maps"
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

// Register registers every handler of All on r, in the order of their type names.
func Register(r pipeline.Registrar) {
	all := All()
	for _, name := range slices.Sorted(maps.Keys(all)) {
		r.Handle(name, all[name])
	}
}
