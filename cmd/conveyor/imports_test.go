package main

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const libraryModule = "github.com/conveyorq/conveyor"

// harnessPackages are the library's internal packages the torture suite links: a
// redis-server launcher and a TCP fault proxy. The library's own tests need them too, so they
// stay in the library. They know nothing of Conveyor, which TestPublicAPIOnly checks.
var harnessPackages = []string{
	libraryModule + "/internal/faultproxy",
	libraryModule + "/internal/redisproc",
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

// goList runs `go list -json` on patterns in this module and decodes its stream of packages.
func goList(t *testing.T, patterns ...string) []listedPackage {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-json=ImportPath,Imports"}, patterns...)...).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr)
	}
	require.NoError(t, err)
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
}

// TestPublicAPIOnly holds the binary to the library's public API: no package of this module
// imports one of the library's internal packages, but for the two harness packages. A
// release of the binary then builds against any library version with the same public API.
func TestPublicAPIOnly(t *testing.T) {
	t.Parallel()
	pkgs := goList(t, "./...")
	require.NotEmpty(t, pkgs)
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, libraryModule+"/internal/") && !slices.Contains(harnessPackages, imp) {
				t.Errorf("%s imports %s: use the library's public API (pipeline, api, metrics, ...)", p.ImportPath, imp)
			}
		}
	}
	for _, h := range goList(t, harnessPackages...) {
		for _, imp := range h.Imports {
			if imp == libraryModule || strings.HasPrefix(imp, libraryModule+"/") {
				t.Errorf("harness package %s imports %s: it must not carry the library's internals", h.ImportPath, imp)
			}
		}
	}
}
