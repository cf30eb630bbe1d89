package jobstate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every script, joined with the job functions it uses, defines each one once and above its
// callers (a Lua local is unknown above its definition, and a script calling one would call
// nil); every job function is used by some script.
func TestScriptsJoinTheJobFunctionsTheyCall(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("*.lua")
	if err != nil || len(paths) < 20 {
		t.Fatalf("found %d scripts (%v)", len(paths), err)
	}
	defRE := regexp.MustCompile(`(?m)^local function (cv_\w+)\(`)
	callRE := regexp.MustCompile(`\b(cv_\w+)\(`)
	comment := regexp.MustCompile(`--.*`)
	ours := jobLib.Names()
	used := map[string]bool{}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		joined := jobLib.Join(string(src))
		defined := map[string]bool{}
		for _, line := range strings.Split(joined, "\n") {
			if m := defRE.FindStringSubmatch(line); m != nil {
				if defined[m[1]] {
					t.Errorf("%s: %s defined twice", p, m[1])
				}
				defined[m[1]] = true
				used[m[1]] = true
				continue
			}
			for _, m := range callRE.FindAllStringSubmatch(comment.ReplaceAllString(line, ""), -1) {
				if slices.Contains(ours, m[1]) && !defined[m[1]] {
					t.Errorf("%s: %s is called above its definition", p, m[1])
				}
			}
		}
	}
	for _, n := range ours {
		if !used[n] {
			t.Errorf("job function %s is used by no script", n)
		}
	}
}
