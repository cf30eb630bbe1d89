package script

import "strings"

// The Lua scanning behind Library and withLib. It is plain string search, not regexp: every
// process that imports this package joins all of Conveyor's scripts at init, and the regexps
// did cost it about 1.3 G instructions (docs/BENCHMARKS.md, "Issue 32: startup"). Each
// function names the regexp it stands for; scan_test.go checks the two agree.

// isWord reports whether c is a word character of regexp's \w and \b (ASCII only).
func isWord(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// wordEnd returns the end of the run of word characters in s from i.
func wordEnd(s string, i int) int {
	for i < len(s) && isWord(s[i]) {
		i++
	}
	return i
}

// funcStart is one `local function cv_<name>(` line: at is where the line starts.
type funcStart struct {
	at   int
	name string
}

// funcStarts finds the functions defined in src: (?m)^local function (cv_\w+)\(
func funcStarts(src string) []funcStart {
	const prefix = "local function cv_"
	var fs []funcStart
	for at := 0; at < len(src); {
		if strings.HasPrefix(src[at:], prefix) {
			name := at + len("local function ")
			end := wordEnd(src, at+len(prefix))
			if end > at+len(prefix) && end < len(src) && src[end] == '(' {
				fs = append(fs, funcStart{at: at, name: src[name:end]})
			}
		}
		nl := strings.IndexByte(src[at:], '\n')
		if nl < 0 {
			break
		}
		at += nl + 1
	}
	return fs
}

// refs returns the names of cv_ functions that code mentions, in order, repeats kept:
// \bcv_\w+\b
func refs(code string) []string {
	var out []string
	for i := 0; ; {
		j := strings.Index(code[i:], "cv_")
		if j < 0 {
			return out
		}
		at := i + j
		end := wordEnd(code, at+len("cv_"))
		if end == at+len("cv_") || at > 0 && isWord(code[at-1]) {
			i = at + 1 // not a name, or the tail of a longer word
			continue
		}
		out = append(out, code[at:end])
		i = end
	}
}

// stripComments drops every line's text from its first "--" on, keeping the line breaks:
// the regexp --.* replaced by "".
func stripComments(s string) string {
	if !strings.Contains(s, "--") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for s != "" {
		line, rest, found := strings.Cut(s, "\n")
		if c := strings.Index(line, "--"); c >= 0 {
			line = line[:c]
		}
		b.WriteString(line)
		if found {
			b.WriteByte('\n')
		}
		s = rest
	}
	return b.String()
}

// code is one reply code's line of lib.lua.
type code struct {
	line, name string
}

// codes finds lib.lua's reply codes: (?m)^local (CV_[A-Z_]+) = (\d+)$
func codes(src string) []code {
	var out []code
	for src != "" {
		line, rest, _ := strings.Cut(src, "\n")
		src = rest
		name, ok := strings.CutPrefix(line, "local CV_")
		if !ok {
			continue
		}
		n := 0
		for n < len(name) && (name[n] == '_' || 'A' <= name[n] && name[n] <= 'Z') {
			n++
		}
		num, ok := strings.CutPrefix(name[n:], " = ")
		if n == 0 || !ok || num == "" || strings.TrimLeft(num, "0123456789") != "" {
			continue
		}
		out = append(out, code{line: line, name: "CV_" + name[:n]})
	}
	return out
}

// hasWord reports whether w (word characters only) stands in s as a whole word: \bw\b
func hasWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		at := i + j
		end := at + len(w)
		if (at == 0 || !isWord(s[at-1])) && (end == len(s) || !isWord(s[end])) {
			return true
		}
		i = at + 1
	}
}

// blankComments empties every line that is a comment alone (its first text "--"), keeping the
// line breaks. A comment after code stays: "--" may be inside a string there. So does a long
// comment or string ("[[" ... "]]"), which none of the scripts has (TestNoLongBrackets).
func blankComments(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for s != "" {
		line, rest, found := strings.Cut(s, "\n")
		if !strings.HasPrefix(strings.TrimLeft(line, " \t"), "--") {
			b.WriteString(line)
		}
		if found {
			b.WriteByte('\n')
		}
		s = rest
	}
	return b.String()
}
