package jobstate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/status"
)

// isStatus reports whether s is a status's name.
func isStatus(s string) bool {
	for _, st := range status.All() {
		if string(st) == s {
			return true
		}
	}
	return false
}

// statusLiterals returns the statuses quoted in Lua code (comments left out), as found.
func statusLiterals(code string) []string {
	var out []string
	for _, line := range strings.Split(code, "\n") {
		for _, m := range luaLiteral.FindAllStringSubmatch(luaComment.ReplaceAllString(line, ""), -1) {
			if s := m[1] + m[2]; isStatus(s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// A job's statuses are the store's words. No .lua file outside internal/jobstate, and no Go of
// internal/script (the runner, which knows no job), quotes one: a transition written outside
// the store fails here.
func TestStatusLiteralsStayInTheStore(t *testing.T) {
	t.Parallel()
	if got := statusLiterals("if h[2] == 'queued' then -- 'failed'\nx = \"canceled\" end"); strings.Join(got, " ") != "queued canceled" {
		t.Fatalf("the check finds %v", got)
	}
	for path, src := range luaFiles(t) {
		if strings.HasPrefix(path, "internal/jobstate/") {
			continue
		}
		if got := statusLiterals(src); len(got) > 0 {
			t.Errorf("%s quotes statuses %v: a job transition belongs in internal/jobstate's Lua", path, got)
		}
	}
	goFiles, err := filepath.Glob(filepath.Join(root, "internal/script/*.go"))
	if err != nil || len(goFiles) == 0 {
		t.Fatalf("found no Go in internal/script (%v)", err)
	}
	for _, path := range goFiles {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			if isStatus(v) || len(statusLiterals(v)) > 0 {
				t.Errorf("%s quotes a status in %s: internal/script knows no job", path, lit.Value)
			}
			return true
		})
	}
}
