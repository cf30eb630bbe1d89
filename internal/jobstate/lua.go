package jobstate

import (
	"embed"
	"io/fs"

	"github.com/conveyorq/conveyor/internal/script"
)

// The job's Lua functions, by concern: the fence (cv_live), the stream entry, the record, the
// dead set, limits, groups and workflows. Statuses are quoted only in this package's Lua (a
// drift test keeps it so).
//
// Some keys are built inside scripts, not passed in KEYS. A job's hash may be found through an
// id only Redis knows (in the scheduled set, or a stream entry). A job's unique key is named in
// its hash. Both carry the queue's hash tag, so they live in the cluster slot of the keys passed.
//
//go:embed lua/*.lua
var luaFS embed.FS

// jobLib is the functions of lua/*.lua, which newScript joins into the scripts that use them.
var jobLib = script.NewLibrary(luaSources()...)

// luaSources returns lua/*.lua, in name order.
func luaSources() []string {
	names, err := fs.Glob(luaFS, "lua/*.lua")
	if err != nil {
		panic(err)
	}
	srcs := make([]string, len(names))
	for i, n := range names {
		b, err := luaFS.ReadFile(n)
		if err != nil {
			panic(err)
		}
		srcs[i] = string(b)
	}
	return srcs
}

// newScript is script.New of src behind the job functions it uses. Only those: each one costs a
// closure on every call (script.New).
func newScript(src string) *script.Script {
	return script.New(jobLib.Join(src))
}
