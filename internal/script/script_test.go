package script

import (
	"strconv"
	"strings"
	"testing"
)

func TestWithLibIncludesWhatIsUsed(t *testing.T) {
	t.Parallel()
	names, bodies := libFuncs()
	if len(names) < 10 {
		t.Fatalf("found %d library functions; the parser lost some", len(names))
	}
	for _, n := range names {
		if !strings.Contains(bodies[n], "local function "+n+"(") || !strings.HasSuffix(bodies[n], "\nend\n") {
			t.Fatalf("function %s badly cut:\n%s", n, bodies[n])
		}
	}
	// cv_replace uses cv_job and cv_xadd: all three come, in library order, and nothing else.
	got := withLib("return cv_replace(1)")
	for _, want := range []string{"cv_replace(", "cv_job(", "cv_xadd("} {
		if !strings.Contains(got, "local function "+want) {
			t.Fatalf("missing %s in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "local function cv_to_dead(") {
		t.Fatal("an unused function was joined")
	}
	if strings.Index(got, "function cv_xadd(") > strings.Index(got, "function cv_replace(") {
		t.Fatal("a function came after its user")
	}
	if withLib("return 1") != "return 1" {
		t.Fatal("a script using nothing got library code")
	}
}

func TestEveryLibFunctionIsUsable(t *testing.T) {
	t.Parallel()
	names, _ := libFuncs()
	all := withLib("return {" + strings.Join(names, ", ") + "}")
	for _, n := range names {
		if strings.Count(all, "local function "+n+"(") != 1 {
			t.Fatalf("%s joined %d times", n, strings.Count(all, "local function "+n+"("))
		}
	}
}

// lib.lua's reply codes and Go's are the same list.
func TestCodesMatchLib(t *testing.T) {
	t.Parallel()
	inLua := map[string]string{}
	for _, m := range libCode.FindAllStringSubmatch(lib, -1) {
		inLua[m[1]] = m[2]
	}
	if len(inLua) != len(codeNames) {
		t.Fatalf("lib.lua has %d codes, Go %d", len(inLua), len(codeNames))
	}
	for c, name := range codeNames {
		if inLua[name] != strconv.FormatInt(int64(c), 10) {
			t.Fatalf("%s is %q in lib.lua, %d in Go", name, inLua[name], c)
		}
	}
	if got := withLib("return {CV_OK}"); !strings.HasPrefix(got, "local CV_OK = 0\n") || strings.Contains(got, "CV_DIED") {
		t.Fatalf("codes joined badly:\n%s", got)
	}
}
