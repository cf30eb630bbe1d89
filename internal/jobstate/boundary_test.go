package jobstate_test

import (
	"fmt"
	"go/types"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/internal/gotypes"
)

// goRedis is the import path of the client whose calls the boundary test finds.
const goRedis = "github.com/redis/go-redis/v9"

// mod is the module's path.
const mod = "github.com/conveyorq/conveyor"

// redisUsers are the places outside the store that may send Redis commands themselves, each
// for a reason that is not job or queue state. A key is a package path below the module (the
// whole package) or a package path and file name joined by ":" (that file only).
var redisUsers = map[string]string{
	"internal/jobstate": "the store itself",
	"internal/script":   "the script runner: SCRIPT LOAD and EVALSHA of the store's scripts",
	"internal/events":   "the job events' Pub/Sub transport and the detection of its mode",
	"stream":            "the transport: a stream's consumer group, read, ack and claim",
	"internal/periodic": "the periodic schedules' own store; the jobs it makes go through pipeline",
	"internal/lock":     "the locks of one-at-a-time duties (recovery's scans, the periodic scheduler): their own keys",

	"internal/durable":     "WAIT for replicas behind a write, on the writer's own connection",
	"delayed:scheduler.go": "the wake-up notices' Pub/Sub",

	// Test support, not the library: it starts, seeds or inspects servers for tests.
	"internal/redistest": "test servers",
	"internal/redisproc": "test servers",
	"internal/hostile":   "checks that a refused input wrote nothing",
	"internal/jobtest":   "seeds jobs as a worker would: reads their entries, waits on their stats",
}

// notCommands are go-redis methods that send no command of their own: client and pipeline
// handling, and the reading of a reply or a subscription.
var notCommands = map[string]bool{
	"Close": true, "AddHook": true, "Options": true, "PoolStats": true, "Pipeline": true,
	"TxPipeline": true, "Pipelined": true, "TxPipelined": true, "Exec": true, "Discard": true,
	"Len": true, "Channel": true, "ChannelSize": true, "ChannelWithSubscriptions": true,
	"Receive": true, "ReceiveMessage": true, "ReceiveTimeout": true, "String": true,
	"ForEachShard": true, "ForEachMaster": true, "ForEachSlave": true, "Hash": true,
	"Cmds": true, "MasterForKey": true, "WithTimeout": true,
	// PING reads and writes nothing: a liveness check anywhere is fine.
	"Ping": true,
}

// redisCalls type-checks every package of the module (its non-test files: tests set up and
// read the state they check) and returns each call of a go-redis method that sends a command,
// as "dir/file.go:line Method".
func redisCalls(t *testing.T) map[string][]string {
	t.Helper()
	list, err := gotypes.Load(root)
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	calls := map[string][]string{}
	for _, p := range list.Packages {
		if p.Standard || p.Module == nil || p.Module.Path != mod {
			continue
		}
		_, info, err := list.Check(p)
		if err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		for sel, s := range info.Selections {
			if s.Kind() != types.MethodVal || !isCommand(s.Obj().(*types.Func)) {
				continue
			}
			pos := list.Fset.Position(sel.Sel.Pos())
			calls[rel] = append(calls[rel], fmt.Sprintf("%s:%d %s", filepath.Base(pos.Filename), pos.Line, sel.Sel.Name))
		}
	}
	return calls
}

// isCommand reports whether f is a go-redis method that sends a command: not a method of a
// reply (the *Cmd types), nor one of notCommands.
func isCommand(f *types.Func) bool {
	if f.Pkg() == nil || f.Pkg().Path() != goRedis || notCommands[f.Name()] {
		return false
	}
	recv := f.Type().(*types.Signature).Recv().Type()
	if p, ok := recv.(*types.Pointer); ok {
		recv = p.Elem()
	}
	named, ok := recv.(*types.Named)
	if !ok {
		return true
	}
	n := named.Obj().Name()
	return !strings.HasSuffix(n, "Cmd") && n != "Cmder" && n != "PubSub" && n != "Message" && n != "ScanIterator"
}

// allowed says why rel's file may send Redis commands, or "" when it may not.
func allowed(rel, file string) string {
	if why, ok := redisUsers[rel+":"+file]; ok {
		return why
	}
	for p := rel; p != "."; p = filepath.Dir(p) {
		if why, ok := redisUsers[p]; ok {
			return why
		}
	}
	return ""
}

// Nothing outside the store sends a go-redis command on job or queue state: the places that
// send commands at all are redisUsers, each with its reason. A new call elsewhere is a method
// of jobstate.Store to write, or a reason to add here.
func TestOnlyTheStoreTouchesJobState(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the whole module")
	}
	calls := redisCalls(t)
	n := 0
	for rel, cs := range calls {
		n += len(cs)
		for _, c := range cs {
			t.Logf("%s/%s (%s)", rel, c, allowed(rel, c[:strings.IndexByte(c, ':')]))
		}
	}
	t.Logf("%d go-redis command calls in %d packages", n, len(calls))
	var bad []string
	for rel, cs := range calls {
		for _, c := range cs {
			file := c[:strings.IndexByte(c, ':')]
			if allowed(rel, file) == "" {
				bad = append(bad, rel+"/"+c)
			}
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("go-redis calls outside the store (make them jobstate.Store methods):\n%s", strings.Join(bad, "\n"))
	}
	// A reason no call needs any more is a door left open.
	for key := range redisUsers {
		rel, file, _ := strings.Cut(key, ":")
		used := slices.ContainsFunc(calls[rel], func(c string) bool { return file == "" || strings.HasPrefix(c, file+":") })
		if !used {
			t.Errorf("redisUsers lists %s, which sends no command: remove it", key)
		}
	}
}
