// Package archtest holds docs/ARCHITECTURE.md to the code. The document's `archmap` table
// has a row per package: the Conveyor packages it imports, whether it touches Redis, whether
// it imports OpenTelemetry. It covers the library module, and the binary's once cmd/conveyor
// has a go.mod. The test compares each row with `go list` and with a type check of the
// package's calls into go-redis.
package archtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/types"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/internal/gotypes"
)

const (
	modulePath = "github.com/conveyorq/conveyor"
	goRedis    = "github.com/redis/go-redis/v9"
	otel       = "go.opentelemetry.io/otel"
	doc        = "docs/ARCHITECTURE.md"
)

// moduleDirs are the modules the table covers, relative to the repository root. The e2e and
// bench modules are left out: their dependencies are not the library's.
var moduleDirs = []string{".", "cmd/conveyor"}

// Redis column values. A package "calls" when it calls a method of a go-redis client,
// pipeline, script, pub/sub or iterator. A package whose only use is go-redis's types,
// errors, hooks or command results is "types".
const (
	redisNo    = "no"
	redisTypes = "types"
	redisCalls = "calls"
)

// row is one package's line of the archmap table.
type row struct {
	pkg     string
	imports []string
	redis   string // redisNo, redisTypes or redisCalls
	otel    bool
	line    int
}

// actual is what the code says of one package.
type actual struct {
	pkg      string
	imports  []string
	redis    string
	calls    []string // go-redis call sites, "file.go:12 Method"
	otelImps []string
}

func TestArchitectureMap(t *testing.T) {
	root, _, rows := readMap(t)
	got := packages(t, root)
	for _, msg := range compare(rows, got) {
		t.Error(msg)
	}
}

// TestPackagesHaveOwnsRow keeps the prose tables of "Packages" to the same set of packages
// as the archmap table.
func TestPackagesHaveOwnsRow(t *testing.T) {
	_, text, rows := readMap(t)
	owned := ownsRows(text)
	for _, r := range rows {
		if !owned[r.pkg] {
			t.Errorf("%s: package %s has an archmap row but no row in the \"Packages\" tables; add a row \"| `%s` | what it owns |\"", doc, r.pkg, r.pkg)
		}
		delete(owned, r.pkg)
	}
	for _, p := range slices.Sorted(maps.Keys(owned)) {
		t.Errorf("%s: the \"Packages\" tables name %s, which has no archmap row (no such package?); fix the name or drop the row", doc, p)
	}
}

// TestNamedTestsExist fails when the document names a test that no test file defines.
func TestNamedTestsExist(t *testing.T) {
	root, text, _ := readMap(t)
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)\w*)\(`)
	for _, path := range repoFiles(t, root, "_test.go") {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Z]\\w*)`")
	seen := map[string]bool{}
	for _, m := range named.FindAllStringSubmatch(text, -1) {
		if name := m[1]; !defined[name] && !seen[name] {
			seen[name] = true
			t.Errorf("%s names %s, which no _test.go file in the repository defines; rename it or drop it", doc, name)
		}
	}
}

// readMap returns the repository's root, the document and its archmap rows.
func readMap(t *testing.T) (root, text string, rows []row) {
	t.Helper()
	root = repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	if rows, err = parseTable(string(b)); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return root, string(b), rows
}

// TestNamedFilesExist fails when the document names a script or a Go file by its path and
// the repository has no such file. A bare Go file name (`worker.go`) is left alone: its
// package is in the sentence around it.
func TestNamedFilesExist(t *testing.T) {
	root, text, _ := readMap(t)
	lua := map[string]bool{}
	for _, path := range repoFiles(t, root, ".lua") {
		lua[filepath.Base(path)] = true
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b[a-z0-9_]+\.lua\b`).FindAllString(text, -1) {
		if !lua[m] && !seen[m] {
			seen[m] = true
			t.Errorf("%s names the script %s, which no directory of the repository holds; fix the name or the sentence", doc, m)
		}
	}
	for _, m := range regexp.MustCompile("`([a-z0-9_]+(?:/[a-z0-9_]+)*/[a-z0-9_]+\\.go)`").FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil && !seen[m[1]] {
			seen[m[1]] = true
			t.Errorf("%s names %s, which does not exist; fix the path or the sentence", doc, m[1])
		}
	}
}

// repoFiles are the repository's files whose names end in suffix, hidden directories left out.
func repoFiles(t *testing.T, root, suffix string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, suffix):
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// repoRoot is the directory of the library's go.mod, above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module "+modulePath+"\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test's directory", modulePath)
		}
		dir = parent
	}
}

var fence = regexp.MustCompile("(?s)\n```archmap\n(.*?)\n```")

// parseTable reads the archmap block. A line whose package cell is empty continues the row
// above it with more imports.
func parseTable(text string) ([]row, error) {
	m := fence.FindStringSubmatchIndex(text)
	if m == nil {
		return nil, errors.New("no ```archmap block")
	}
	first := strings.Count(text[:m[2]], "\n") + 1
	var rows []row
	seen := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(text[m[2]:m[3]]))
	for n := first; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) != 4 {
			return nil, fmt.Errorf("line %d: want 4 cells split by |, got %d: %q", n, len(cells), line)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "package" {
			continue // the header
		}
		imports := strings.Fields(strings.ReplaceAll(cells[1], ",", " "))
		if len(imports) == 1 && imports[0] == "-" {
			imports = nil
		}
		if cells[0] == "" {
			if len(rows) == 0 || cells[2] != "" || cells[3] != "" {
				return nil, fmt.Errorf("line %d: a continuation line (empty package cell) carries imports only, after a row", n)
			}
			rows[len(rows)-1].imports = append(rows[len(rows)-1].imports, imports...)
			continue
		}
		r := row{pkg: cells[0], imports: imports, line: n}
		switch w := firstWord(cells[2]); w {
		case redisNo, redisTypes, redisCalls:
			r.redis = w
		default:
			return nil, fmt.Errorf("line %d (%s): the Redis cell starts with %q; want %q, %q or %q", n, r.pkg, w, redisNo, redisTypes, redisCalls)
		}
		switch w := firstWord(cells[3]); w {
		case "yes", "no":
			r.otel = w == "yes"
		default:
			return nil, fmt.Errorf("line %d (%s): the otel cell starts with %q; want yes or no", n, r.pkg, w)
		}
		if prev, ok := seen[r.pkg]; ok {
			return nil, fmt.Errorf("line %d: a second row of %s (the first at line %d)", n, r.pkg, prev)
		}
		seen[r.pkg] = n
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errors.New("the ```archmap block has no rows")
	}
	return rows, nil
}

func firstWord(s string) string {
	return strings.TrimRight(strings.SplitN(s, " ", 2)[0], ":;,")
}

// ownsRows are the packages the "Packages" tables name in their first column.
func ownsRows(text string) map[string]bool {
	out := map[string]bool{}
	tick := regexp.MustCompile("`([a-z][a-z0-9/]*)`")
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line[1:], "|", 2)[0]
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// packages lists the packages of every module the table covers and type-checks each, so
// that a call into go-redis through another package's value (Client.Redis().Ping) counts.
func packages(t *testing.T, root string) map[string]actual {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	out := map[string]actual{}
	for _, dir := range moduleDirs {
		if _, err := os.Stat(filepath.Join(root, dir, "go.mod")); err != nil {
			continue // not a module of its own (yet); its packages are the library's
		}
		for k, v := range moduleActual(t, filepath.Join(root, dir)) {
			out[k] = v
		}
	}
	return out
}

func moduleActual(t *testing.T, dir string) map[string]actual {
	t.Helper()
	list, err := gotypes.Load(dir)
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	out := map[string]actual{}
	for _, p := range list.Packages {
		if p.DepOnly {
			continue
		}
		if p.Error != nil {
			t.Fatalf("go list in %s: %s: %s", dir, p.ImportPath, p.Error.Err)
		}
		a := actual{pkg: short(p.ImportPath), redis: redisNo}
		for _, i := range p.Imports {
			switch {
			case i == modulePath || strings.HasPrefix(i, modulePath+"/"):
				a.imports = append(a.imports, short(i))
			case i == goRedis || strings.HasPrefix(i, goRedis+"/"):
				a.redis = redisTypes
			case i == otel || strings.HasPrefix(i, otel+"/"):
				a.otelImps = append(a.otelImps, i)
			}
		}
		a.calls = redisCallSites(t, list, p)
		if len(a.calls) > 0 {
			a.redis = redisCalls
		}
		out[a.pkg] = a
	}
	return out
}

func short(path string) string {
	return strings.TrimPrefix(path, modulePath+"/")
}

// redisCallSites type-checks p and returns its calls of go-redis methods that reach Redis or
// hold a connection: every method but those of command results (*XxxCmd, Cmder).
func redisCallSites(t *testing.T, list *gotypes.List, p gotypes.Package) []string {
	t.Helper()
	if len(p.GoFiles) == 0 {
		return nil
	}
	files, info, err := list.Check(p)
	if err != nil {
		t.Fatalf("type-checking %s: %v", p.ImportPath, err)
	}
	var sites []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			se, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			sel, ok := info.Selections[se]
			if !ok || sel.Kind() != types.MethodVal {
				return true
			}
			fn := sel.Obj()
			if fn.Pkg() == nil || !strings.HasPrefix(fn.Pkg().Path(), goRedis) {
				return true
			}
			if recv := recvName(fn); strings.HasSuffix(recv, "Cmd") || recv == "Cmder" {
				return true
			}
			pos := list.Fset.Position(call.Pos())
			sites = append(sites, fmt.Sprintf("%s:%d %s", filepath.Base(pos.Filename), pos.Line, fn.Name()))
			return true
		})
	}
	return sites
}

// recvName is the name of the type that declares method fn.
func recvName(fn types.Object) string {
	sig, ok := fn.Type().(*types.Signature)
	if !ok || sig.Recv() == nil {
		return ""
	}
	typ := sig.Recv().Type()
	if p, ok := typ.(*types.Pointer); ok {
		typ = p.Elem()
	}
	if n, ok := typ.(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

// compare returns one message per disagreement, each naming the row and the fix.
func compare(rows []row, got map[string]actual) []string {
	var msgs []string
	at := map[string]int{}
	for i, r := range rows {
		at[r.pkg] = i
	}
	for _, r := range rows {
		a, ok := got[r.pkg]
		if !ok {
			msgs = append(msgs, fmt.Sprintf("%s:%d: row %s names no package of the modules (moved or deleted?); rename the row to the package's new path or delete it", doc, r.line, r.pkg))
			continue
		}
		for _, i := range a.imports {
			if !slices.Contains(r.imports, i) {
				msgs = append(msgs, fmt.Sprintf("%s:%d: row %s: add %s to its imports (go list: %s imports it)", doc, r.line, r.pkg, i, r.pkg))
			}
		}
		for _, i := range r.imports {
			if !slices.Contains(a.imports, i) {
				msgs = append(msgs, fmt.Sprintf("%s:%d: row %s: remove %s from its imports (go list: %s does not import it)", doc, r.line, r.pkg, i, r.pkg))
			} else if j, ok := at[i]; ok && j < at[r.pkg] {
				msgs = append(msgs, fmt.Sprintf("%s:%d: row %s imports %s, whose row is above it; move %s's row below %s's (a row names only packages below it)", doc, r.line, r.pkg, i, i, r.pkg))
			}
		}
		if r.redis != a.redis {
			msgs = append(msgs, fmt.Sprintf("%s:%d: row %s: the Redis cell says %q, the code says %q (%s); start the cell with %q and say what it touches", doc, r.line, r.pkg, r.redis, a.redis, redisEvidence(a), a.redis))
		}
		if r.otel != (len(a.otelImps) > 0) {
			if r.otel {
				msgs = append(msgs, fmt.Sprintf("%s:%d: row %s: the otel cell says yes, but it imports nothing of %s; write no", doc, r.line, r.pkg, otel))
			} else {
				msgs = append(msgs, fmt.Sprintf("%s:%d: row %s: the otel cell says no, but it imports %s; write yes (and the rule in \"Import graph\" that allows it)", doc, r.line, r.pkg, strings.Join(a.otelImps, ", ")))
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if _, ok := at[p]; ok {
			continue
		}
		a := got[p]
		otelCell := "no"
		if len(a.otelImps) > 0 {
			otelCell = "yes"
		}
		imports := strings.Join(a.imports, " ")
		if imports == "" {
			imports = "-"
		}
		redisCell := a.redis
		if a.redis != redisNo {
			redisCell += ": <what it touches>"
		}
		msgs = append(msgs, fmt.Sprintf("%s: no row for package %s; add, above the rows of the packages it imports:\n\t%s | %s | %s | %s", doc, p, p, imports, redisCell, otelCell))
	}
	return msgs
}

func redisEvidence(a actual) string {
	switch a.redis {
	case redisCalls:
		n := min(len(a.calls), 3)
		more := ""
		if len(a.calls) > n {
			more = fmt.Sprintf(" and %d more", len(a.calls)-n)
		}
		return "go-redis calls at " + strings.Join(a.calls[:n], ", ") + more
	case redisTypes:
		return "imports " + goRedis + " but calls no client method"
	}
	return "neither imports nor calls go-redis"
}
