package script

import (
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
