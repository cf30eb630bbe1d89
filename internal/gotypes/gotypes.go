// Package gotypes lists a module's packages with `go list -export` and type-checks them with
// go/types. It serves the tests that hold the code to a rule about its calls:
// internal/archtest's map of the packages and internal/jobstate's boundary test. Each test
// walks the checked files itself; the listing and the checking are written once, here.
//
// It is test support: no package of the library imports it.
package gotypes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Package is one package of `go list -e -export -deps -json`: the fields the tests read.
type Package struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Export     string // the file of its export data
	DepOnly    bool   // listed only as a dependency of the patterns
	Standard   bool
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// List is the packages of one module and every package they import. Its importer reads the
// export data the listing built, so Check needs no source of the dependencies.
type List struct {
	Packages []Package
	Fset     *token.FileSet
	imp      types.Importer
}

// Load runs `go list -e -export -deps -json ./...` in dir, the directory of a module. A
// failed command's error carries its standard error.
func Load(dir string) (*List, error) {
	cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-json", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, stderr.String())
	}
	l := &List{Fset: token.NewFileSet()}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		l.Packages = append(l.Packages, p)
	}
	exports := map[string]string{}
	for _, p := range l.Packages {
		exports[p.ImportPath] = p.Export
	}
	l.imp = importer.ForCompiler(l.Fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	return l, nil
}

// Check parses p's non-test Go files and type-checks them. The Info it returns holds the
// selections (x.f), which tell a method call from a field or a function. Tests are left
// out: they set up and read the state a rule is about.
func (l *List) Check(p Package) ([]*ast.File, *types.Info, error) {
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(l.Fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: l.imp}
	if _, err := conf.Check(p.ImportPath, l.Fset, files, info); err != nil {
		return nil, nil, err
	}
	return files, info, nil
}
