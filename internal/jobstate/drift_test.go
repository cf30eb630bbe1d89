package jobstate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/status"
)

// root is the module's root, from this package's directory.
const root = "../.."

// constants returns the string constants declared in a Go file whose names match nameRE (and,
// when typ is not empty, whose declared type is typ), by name. Only internal/keys is read this
// way: its names are plain constants, with no list to ask.
func constants(t *testing.T, file string, nameRE *regexp.Regexp, typ string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, file), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if typ != "" {
				id, ok := vs.Type.(*ast.Ident)
				if !ok || id.Name != typ {
					continue
				}
			}
			for i, name := range vs.Names {
				if !nameRE.MatchString(name.Name) || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					out[name.Name] = v
				}
			}
		}
	}
	return out
}

// luaFiles returns every .lua file of the module (not the bench module's), by path.
func luaFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".lua") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[strings.TrimPrefix(path, root+"/")] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	luaComment = regexp.MustCompile(`--.*`)
	luaLiteral = regexp.MustCompile(`'([^'\\]*)'|"([^"\\]*)"`)
	// word is what a status, a field, a counter or an op looks like; other literals (Redis
	// commands and keywords in capitals, numbers, messages, patterns) are not names.
	word = regexp.MustCompile(`^[a-z_]+$`)
)

// Every lower-case word quoted in a Lua script is a name Go defines: a job status
// (status.All), a job-hash field, a stream-entry field or a stats counter (internal/keys),
// or one of finish.lua's ops (jobstate). A status or field that a script adds or misspells
// without a constant fails here, so the state machine cannot grow a state in Lua alone.
func TestLuaNamesAreGoConstants(t *testing.T) {
	t.Parallel()
	known := map[string]string{}
	add := func(kind string, m map[string]string) {
		for name, v := range m {
			known[v] = kind + " " + name
		}
	}
	for _, s := range status.All() {
		known[string(s)] = "status"
	}
	add("keys", constants(t, "internal/keys/keys.go", regexp.MustCompile(`^(Field|Entry|Stat|Group|QueueKey|ScheduleField|Attempt[A-Z])`), ""))
	for _, op := range jobstate.OpNames() {
		known[op] = "jobstate op"
	}
	// The scopes of the limits hash that name no type (admit.lua).
	for _, perKey := range []bool{false, true} {
		known[jobstate.LimitField("", perKey)] = "limit scope"
	}
	// Not Conveyor's names: fields of Redis's own replies (XINFO CONSUMERS) and Lua's type names.
	for _, w := range []string{"name", "pending", "idle", "string", "table"} {
		known[w] = "redis or lua"
	}
	files := luaFiles(t)
	if len(files) < 12 {
		t.Fatalf("found %d Lua files; the walk lost some", len(files))
	}
	for path, src := range files {
		for n, line := range strings.Split(src, "\n") {
			code := luaComment.ReplaceAllString(line, "")
			for _, m := range luaLiteral.FindAllStringSubmatch(code, -1) {
				lit := m[1] + m[2]
				if word.MatchString(lit) && known[lit] == "" {
					t.Errorf("%s:%d: %q is not a Status, a keys Field/Entry/Stat constant or an op", path, n+1, lit)
				}
			}
		}
	}
}

// docs/STATE_MACHINE.md names every status, and only statuses the code has; every script it
// names exists.
func TestStateMachineMapMatchesCode(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(root, "docs/STATE_MACHINE.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := statusNames()
	// The statuses section lists each status as a heading: "### `queued`".
	var got []string
	for _, m := range regexp.MustCompile("(?m)^### `([a-z_]+)`").FindAllStringSubmatch(string(doc), -1) {
		got = append(got, m[1])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("STATE_MACHINE.md lists statuses %v, the code has %v", got, want)
	}
	files := luaFiles(t)
	for _, m := range regexp.MustCompile("`([a-z0-9_]+\\.lua)`").FindAllStringSubmatch(string(doc), -1) {
		found := false
		for path := range files {
			if filepath.Base(path) == m[1] {
				found = true
			}
		}
		if !found {
			t.Errorf("STATE_MACHINE.md names %s, which does not exist", m[1])
		}
	}
}

// statusNames is status.All as sorted strings.
func statusNames() []string {
	var out []string
	for _, s := range status.All() {
		out = append(out, string(s))
	}
	slices.Sort(out)
	return out
}

// statusesWritten returns the statuses a script's source sets: the value after the 'status'
// field in the arguments of an HSET, or in a list of fields built for one
// (f[#f + 1] = 'status'; f[#f + 1] = 'scheduled', or fields[n + 1], fields[n + 2] = 'status',
// 'failed'). A read (HMGET ... 'status', 'type') is no write.
func statusesWritten(src string) []string {
	var out []string
	src = luaComment.ReplaceAllString(src, "")
	for _, loc := range hsetCall.FindAllStringIndex(src, -1) {
		depth, end := 0, len(src)
		for i := loc[0] + len("redis.call"); i < len(src); i++ { // from the call's own "("
			if src[i] == '(' {
				depth++
			} else if src[i] == ')' {
				if depth--; depth == 0 {
					end = i
					break
				}
			}
		}
		for _, m := range statusArg.FindAllStringSubmatch(src[loc[1]:end], -1) {
			out = append(out, m[1])
		}
	}
	for _, m := range statusListed.FindAllStringSubmatch(src, -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

var (
	hsetCall     = regexp.MustCompile(`redis\.call\('HSET'`)
	statusArg    = regexp.MustCompile(`'status',\s*'([a-z_]+)'`)
	statusListed = regexp.MustCompile(`'status'\s*;\s*[\w.]+\[[^\]]*\]\s*=\s*'([a-z_]+)'|=\s*'status',\s*'([a-z_]+)'`)
)

// The statuses the scripts write are exactly status.All: a status added to Go that no script
// writes, or written by a script without a constant in Go, fails here.
func TestScriptsWriteEveryStatus(t *testing.T) {
	t.Parallel()
	written := map[string][]string{}
	for path, src := range luaFiles(t) {
		for _, st := range statusesWritten(src) {
			written[st] = append(written[st], path)
		}
	}
	var got []string
	for s := range written {
		got = append(got, s)
	}
	slices.Sort(got)
	if want := statusNames(); !slices.Equal(got, want) {
		t.Fatalf("the scripts write statuses %v (%v); status.All is %v", got, written, want)
	}
}
