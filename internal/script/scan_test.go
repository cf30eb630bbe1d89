package script

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The regexps the scanners of scan.go replaced (issue 32), and the join they drove, as it was.
// They pin the scripts: the scanners must produce the same bytes, so the same SHA1s.
var (
	refFuncStart = regexp.MustCompile(`(?m)^local function (cv_\w+)\(`)
	refRef       = regexp.MustCompile(`\bcv_\w+\b`)
	refCode      = regexp.MustCompile(`(?m)^local (CV_[A-Z_]+) = (\d+)$`)
	refComment   = regexp.MustCompile(`--.*`)
)

// refLibrary is newLibrary as it was, with the regexps.
func refLibrary(helpers *Library, srcs ...string) *Library {
	l := &Library{bodies: map[string]string{}}
	for _, src := range srcs {
		prevEnd := 0
		for _, m := range refFuncStart.FindAllStringSubmatchIndex(src, -1) {
			name := src[m[2]:m[3]]
			end := strings.Index(src[m[0]:], "\nend\n")
			if end < 0 {
				panic("script: unterminated Lua function " + name)
			}
			if _, dup := l.bodies[name]; dup || (helpers != nil && helpers.bodies[name] != "") {
				panic("script: Lua function " + name + " defined twice")
			}
			end += m[0] + len("\nend\n")
			head := m[0]
			for head > prevEnd {
				lineStart := strings.LastIndex(src[:head-1], "\n") + 1
				if !strings.HasPrefix(src[lineStart:head], "--") {
					break
				}
				head = lineStart
			}
			l.names = append(l.names, name)
			l.bodies[name] = src[head:end]
			prevEnd = end
		}
	}
	return l
}

// refJoin is Library.Join as it was, with the regexps.
func refJoin(l *Library, src string) string {
	need := map[string]bool{}
	var find func(code string)
	find = func(code string) {
		for _, ref := range refRef.FindAllString(code, -1) {
			if body, ok := l.bodies[ref]; ok && !need[ref] {
				need[ref] = true
				find(body)
			}
		}
	}
	find(src)
	var b strings.Builder
	done := map[string]bool{}
	var emit func(name string)
	emit = func(name string) {
		if done[name] {
			return
		}
		done[name] = true
		for _, ref := range refRef.FindAllString(refComment.ReplaceAllString(l.bodies[name], ""), -1) {
			if need[ref] {
				emit(ref)
			}
		}
		b.WriteString(l.bodies[name])
		b.WriteString("\n")
	}
	for _, name := range l.names {
		if need[name] {
			emit(name)
		}
	}
	b.WriteString(src)
	return b.String()
}

// refWithLib is withLib as it was, with the regexps.
func refWithLib(refBase *Library, src string) string {
	joined := refJoin(refBase, src)
	var b strings.Builder
	for _, m := range refCode.FindAllStringSubmatch(lib, -1) {
		if regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(joined) {
			b.WriteString(m[0])
			b.WriteString("\n")
		}
	}
	b.WriteString(joined)
	return b.String()
}

// readLua returns the Lua files matching pattern, in name order (as internal/jobstate embeds
// them).
func readLua(t testing.TB, pattern string) (names, srcs []string) {
	t.Helper()
	names, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, string(b))
	}
	return names, srcs
}

// Every script of internal/jobstate, joined as jobstate.newScript does, is byte for byte what
// the regexps made: the SHA1s that servers cache stay the same.
func TestScriptsAreWhatTheRegexpsMade(t *testing.T) {
	t.Parallel()
	_, libSrcs := readLua(t, "../jobstate/lua/*.lua")
	names, scripts := readLua(t, "../jobstate/*.lua")
	if len(libSrcs) < 5 || len(scripts) < 20 {
		t.Fatalf("found %d job function files and %d scripts", len(libSrcs), len(scripts))
	}
	refBase := refLibrary(nil, lib)
	if !slices.Equal(base.names, refBase.names) || !equalBodies(base, refBase) {
		t.Fatalf("lib.lua cut differently: %v, was %v", base.names, refBase.names)
	}
	jobLib, refJobLib := NewLibrary(libSrcs...), refLibrary(refBase, libSrcs...)
	if !slices.Equal(jobLib.names, refJobLib.names) || !equalBodies(jobLib, refJobLib) {
		t.Fatalf("job functions cut differently: %v, was %v", jobLib.names, refJobLib.names)
	}
	for i, src := range scripts {
		got := withLib(jobLib.Join(src))
		if want := refWithLib(refBase, refJoin(refJobLib, src)); got != want {
			t.Errorf("%s joined differently:\n%s\n---- was ----\n%s", names[i], got, want)
		}
		// settings.lua is joined without the job functions (script.New, not newScript).
		if got, want := withLib(src), refWithLib(refBase, src); got != want {
			t.Errorf("%s alone joined differently:\n%s\n---- was ----\n%s", names[i], got, want)
		}
	}
	all := "return {" + strings.Join(append(base.Names(), jobLib.Names()...), ", ") + "}"
	if withLib(jobLib.Join(all)) != refWithLib(refBase, refJoin(refJobLib, all)) {
		t.Error("every function at once joined differently")
	}
}

func equalBodies(a, b *Library) bool {
	if len(a.bodies) != len(b.bodies) {
		return false
	}
	for n, body := range a.bodies {
		if b.bodies[n] != body {
			return false
		}
	}
	return true
}

// Each scanner finds what its regexp found, on the real Lua and on whatever the fuzzer makes.
func FuzzScannersMatchRegexps(f *testing.F) {
	f.Add(lib)
	for _, pattern := range []string{"../jobstate/lua/*.lua", "../jobstate/*.lua"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(string(b))
			}
		}
	}
	for _, s := range []string{
		"", "cv_", "cv_a", "xcv_a cv_b", "cv_cv_a", "cv_\xffcv_b", "é cv_a é", "cv_a--cv_b\ncv_c",
		"local function cv_a(\nlocal function cv_(\nlocal function cv_b \nlocal function cv_c(",
		"local CV_OK = 0\nlocal CV_X = \nlocal CV_Y = 1\r\nlocal CV_ = 2\nlocal CV_Z = 3",
		"-- a\n--\n---- b -- c\nx = 1 -- cv_a\n", "CV_OK_X CV_OK", "aCV_OK", "CV_OK",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var starts []funcStart
		for _, m := range refFuncStart.FindAllStringSubmatchIndex(s, -1) {
			starts = append(starts, funcStart{at: m[0], name: s[m[2]:m[3]]})
		}
		if got := funcStarts(s); !slices.Equal(got, starts) {
			t.Fatalf("funcStarts(%q) = %v, regexp %v", s, got, starts)
		}
		if got, want := refs(s), refRef.FindAllString(s, -1); !slices.Equal(got, want) {
			t.Fatalf("refs(%q) = %q, regexp %q", s, got, want)
		}
		if got, want := stripComments(s), refComment.ReplaceAllString(s, ""); got != want {
			t.Fatalf("stripComments(%q) = %q, regexp %q", s, got, want)
		}
		var want []code
		for _, m := range refCode.FindAllStringSubmatch(s, -1) {
			want = append(want, code{line: m[0], name: m[1]})
		}
		if got := codes(s); !slices.Equal(got, want) {
			t.Fatalf("codes(%q) = %q, regexp %q", s, got, want)
		}
		for _, w := range []string{"CV_OK", "CV_DIED", "cv_a"} {
			if got, want := hasWord(s, w), regexp.MustCompile(`\b`+w+`\b`).MatchString(s); got != want {
				t.Fatalf("hasWord(%q, %q) = %v, regexp %v", s, w, got, want)
			}
		}
	})
}

// What a process importing internal/jobstate does at init: cut the job functions, then join
// and hash every script, by the scanners and by the regexps they replaced.
func BenchmarkJoinEveryScript(b *testing.B) {
	_, libSrcs := readLua(b, "../jobstate/lua/*.lua")
	_, scripts := readLua(b, "../jobstate/*.lua")
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			l := newLibrary(newLibrary(nil, lib), libSrcs...)
			for _, src := range scripts {
				New(l.Join(src))
			}
		}
	})
	b.Run("regexp", func(b *testing.B) {
		for b.Loop() {
			refBase := refLibrary(nil, lib)
			l := refLibrary(refBase, libSrcs...)
			for _, src := range scripts {
				full := refWithLib(refBase, refJoin(l, src))
				_, _ = redis.NewScript(full), redis.NewScript(clusterGuard+full)
			}
		}
	})
}

func TestBlankComments(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"comment lines", "-- a\nlocal x = 1\n  -- b\n\t--c\nreturn x", "\nlocal x = 1\n\n\nreturn x"},
		{"a comment after code stays", "local s = 'a -- b' -- c\n", "local s = 'a -- b' -- c\n"},
		{"no comment", "return 1", "return 1"},
		{"empty", "", ""},
		{"a last line with no break", "x()\n-- end", "x()\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := blankComments(tc.in); got != tc.want {
				t.Fatalf("blankComments(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if strings.Count(blankComments(tc.in), "\n") != strings.Count(tc.in, "\n") {
				t.Fatal("a line break was lost: error line numbers would move")
			}
		})
	}
}

// TestNoLongBrackets: blankComments would cut a line of a long string or long comment
// ("[[", "--[[", "[==[") that starts with "--". None of the scripts has one.
func TestNoLongBrackets(t *testing.T) {
	var paths []string
	for _, g := range []string{"*.lua", "../jobstate/*.lua", "../jobstate/lua/*.lua"} {
		p, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p...)
	}
	if len(paths) < 20 {
		t.Fatalf("found %d Lua files", len(paths))
	}
	long := regexp.MustCompile(`\[=*\[`)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if loc := long.FindIndex(b); loc != nil {
			t.Errorf("%s: a long bracket at byte %d", p, loc[0])
		}
	}
}
