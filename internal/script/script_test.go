package script

import (
	"strconv"
	"strings"
	"testing"
)

func TestWithLibIncludesWhatIsUsed(t *testing.T) {
	t.Parallel()
	names := base.Names()
	if len(names) < 5 {
		t.Fatalf("found %d library functions; the parser lost some", len(names))
	}
	for _, n := range names {
		if !strings.Contains(base.bodies[n], "local function "+n+"(") || !strings.HasSuffix(base.bodies[n], "\nend\n") {
			t.Fatalf("function %s badly cut:\n%s", n, base.bodies[n])
		}
	}
	// cv_drop uses cv_call_list: both come, the used one first, and nothing else.
	got := withLib("return cv_drop(1)")
	for _, want := range []string{"cv_drop(", "cv_call_list("} {
		if !strings.Contains(got, "local function "+want) {
			t.Fatalf("missing %s in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "local function cv_entry(") {
		t.Fatal("an unused function was joined")
	}
	if strings.Index(got, "function cv_call_list(") > strings.Index(got, "function cv_drop(") {
		t.Fatal("a function came after its user")
	}
	if withLib("return 1") != "return 1" {
		t.Fatal("a script using nothing got library code")
	}
}

func TestEveryLibFunctionIsUsable(t *testing.T) {
	t.Parallel()
	names := base.Names()
	all := withLib("return {" + strings.Join(names, ", ") + "}")
	for _, n := range names {
		if strings.Count(all, "local function "+n+"(") != 1 {
			t.Fatalf("%s joined %d times", n, strings.Count(all, "local function "+n+"("))
		}
	}
}

// A caller's library joins its functions in the order they use each other, whatever the order
// of its sources, behind which New joins the helpers they use.
func TestLibraryJoinsUsersAfterWhatTheyUse(t *testing.T) {
	t.Parallel()
	l := NewLibrary(
		"-- c uses b\nlocal function cv_c()\n  return cv_b() + cv_num('1', 0)\nend\n",
		"local function cv_b()\n  return cv_a()\nend\n\nlocal function cv_a()\n  return 1\nend\n\nlocal function cv_unused()\n  return 0\nend\n",
	)
	if got := strings.Join(l.Names(), " "); got != "cv_c cv_b cv_a cv_unused" {
		t.Fatalf("names %q", got)
	}
	full := withLib(l.Join("return {cv_c(), cv_a()}"))
	at := func(n string) int { return strings.Index(full, "local function "+n+"(") }
	if at("cv_num") < 0 || at("cv_a") < at("cv_num") || at("cv_b") < at("cv_a") || at("cv_c") < at("cv_b") {
		t.Fatalf("joined out of order:\n%s", full)
	}
	if at("cv_unused") >= 0 || !strings.Contains(full, "-- c uses b\n") {
		t.Fatalf("joined badly:\n%s", full)
	}
	for _, srcs := range [][]string{
		{"local function cv_a()\nend\n", "local function cv_a()\nend\n"},
		{"local function cv_num()\nend\n"},
		{"local function cv_a()\n  return 1\n"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewLibrary(%q) did not panic", srcs)
				}
			}()
			NewLibrary(srcs...)
		}()
	}
}

// lib.lua's reply codes and Go's are the same list.
func TestCodesMatchLib(t *testing.T) {
	t.Parallel()
	inLua := map[string]string{}
	for _, c := range codes(lib) {
		inLua[c.name] = strings.TrimPrefix(c.line, "local "+c.name+" = ")
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
