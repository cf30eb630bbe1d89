// Command testreport turns `go test -json` output into what scripts/test.sh prints. That is a
// line a package as it finishes, and the output of the tests and packages that failed. That
// output is as plain `go test` prints it, not JSON. Then a table of every package's time and
// result, and the slowest tests.
//
// Live, `go test -json ./... | tee out.json | go run ./internal/cmd/testreport -live` prints a
// line a package. From files, `go run ./internal/cmd/testreport -slowest 15 out.json more.json`
// prints the report. To check a split, run `go run ./internal/cmd/testreport -expect list.txt
// -pkg PATH a.json b.json`.
//
// With -expect it also checks that every test in the list ran at least once in the package -pkg
// across the files. The list has one name a line, as `go test -list` prints them. So a split of
// one package's tests into several invocations (-run/-skip) cannot leave a test out. It exits 1
// when a test did not run. Otherwise it exits 0, whatever the tests' results: the caller keeps
// go test's exit code.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string // build-output and build-fail lines
	Test       string
	Elapsed    float64
	Output     string
}

type line struct {
	test string
	text string
}

type pkgResult struct {
	name    string // import path
	label   string // the file it came from: one package may be run by several invocations
	action  string // pass, fail, skip; "" while running (or when go test died)
	elapsed float64
	lines   []line
	failed  map[string]bool // tests that failed
	ran     map[string]bool // tests that started
	ended   map[string]bool // tests that passed, failed or skipped
}

type testResult struct {
	pkg, test string
	action    string
	elapsed   float64
}

type report struct {
	pkgs   map[string]*pkgResult
	order  []string
	tests  []testResult
	builds map[string][]string // import path -> build output
	other  []string            // lines that were not JSON
	live   io.Writer           // a line a package as it ends; nil: quiet
	label  string              // the file being read
}

func newReport(live io.Writer) *report {
	return &report{pkgs: map[string]*pkgResult{}, builds: map[string][]string{}, live: live}
}

func (r *report) pkg(name string) *pkgResult {
	key := name + "\x00" + r.label
	p := r.pkgs[key]
	if p == nil {
		p = &pkgResult{name: name, label: r.label, failed: map[string]bool{}, ran: map[string]bool{}, ended: map[string]bool{}}
		r.pkgs[key] = p
		r.order = append(r.order, key)
	}
	return p
}

// title is how the table names a package: with the file it came from when several files ran it.
func (r *report) title(p *pkgResult) string {
	for _, q := range r.pkgs {
		if q != p && q.name == p.name {
			return short(p.name) + " (" + p.label + ")"
		}
	}
	return short(p.name)
}

// read consumes one `go test -json` stream. Lines that are not JSON (a build error printed by
// an older go, a panic of the go command) are kept and printed as they are.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		b := sc.Bytes()
		var e event
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
			r.other = append(r.other, string(b))
			if r.live != nil {
				fmt.Fprintln(r.live, string(b))
			}
			continue
		}
		r.add(e)
	}
	return sc.Err()
}

func (r *report) add(e event) {
	switch e.Action {
	case "build-output":
		r.builds[e.ImportPath] = append(r.builds[e.ImportPath], e.Output)
		return
	case "build-fail":
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package)
	switch e.Action {
	case "run":
		p.ran[e.Test] = true
	case "output":
		p.lines = append(p.lines, line{test: e.Test, text: e.Output})
	case "pass", "fail", "skip":
		if e.Test == "" {
			p.action, p.elapsed = e.Action, e.Elapsed
			if r.live != nil && !(e.Action == "skip" && len(p.ran) == 0) {
				fmt.Fprintf(r.live, "%-4s %-40s %7.1fs\n", verdict(e.Action), short(e.Package), e.Elapsed)
			}
			return
		}
		p.ended[e.Test] = true
		if e.Action == "fail" {
			p.failed[e.Test] = true
		}
		r.tests = append(r.tests, testResult{pkg: e.Package, test: e.Test, action: e.Action, elapsed: e.Elapsed})
	}
}

func verdict(action string) string {
	switch action {
	case "pass":
		return "ok"
	case "fail":
		return "FAIL"
	case "skip":
		return "skip"
	}
	return "?"
}

// short drops the module path: the table is read by people working in this module.
func short(pkg string) string {
	const module = "github.com/conveyorq/conveyor"
	if pkg == module {
		return "."
	}
	return strings.TrimPrefix(pkg, module+"/")
}

// noise are the lines go test -v prints between a test's lines that say nothing on their own.
func noise(text string) bool {
	for _, p := range []string{"=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(text, p) {
			return true
		}
	}
	return false
}

// failures prints the output lines of the tests that failed, in the order go test printed them.
// It prints the package-level lines (a panic, "FAIL pkg") of the packages that failed or never
// finished, then build errors. A test that started but never ended was running when the test
// binary died. Its lines are printed too, since a timeout's panic is printed as its output. It
// returns how many packages it printed.
func (r *report) failures(w io.Writer) int {
	n := 0
	for _, key := range r.order {
		p := r.pkgs[key]
		if p.action == "pass" || p.action == "skip" {
			continue
		}
		n++
		fmt.Fprintf(w, "\n--- output of %s (%s)\n", r.title(p), orDied(p.action))
		for _, l := range p.lines {
			if (l.test == "" || p.failed[l.test] || !p.ended[l.test]) && !noise(l.text) {
				fmt.Fprint(w, l.text)
			}
		}
		var unended []string
		for t := range p.ran {
			if !p.ended[t] {
				unended = append(unended, t)
			}
		}
		if len(unended) > 0 {
			sort.Strings(unended)
			fmt.Fprintf(w, "--- never ended (running when the test binary stopped): %s\n", strings.Join(unended, " "))
		}
	}
	for path, out := range r.builds {
		n++
		fmt.Fprintf(w, "\n--- build output of %s\n%s", path, strings.Join(out, ""))
	}
	return n
}

func orDied(action string) string {
	if action == "" {
		return "did not finish"
	}
	return "FAIL"
}

// table prints every package that has tests: seconds and result, in the order they finished.
func (r *report) table(w io.Writer) {
	fmt.Fprintf(w, "\n%-40s %8s  %s\n", "package", "seconds", "result")
	var total float64
	noTests := 0
	for _, key := range r.order {
		p := r.pkgs[key]
		if p.action == "skip" && len(p.ran) == 0 {
			noTests++
			continue
		}
		total += p.elapsed
		fmt.Fprintf(w, "%-40s %8.1f  %s\n", r.title(p), p.elapsed, resultWord(p.action))
	}
	fmt.Fprintf(w, "%-40s %8.1f  (packages' own times added up; %d without tests not shown)\n", "sum", total, noTests)
}

func resultWord(action string) string {
	switch action {
	case "pass":
		return "pass"
	case "fail":
		return "FAIL"
	case "skip":
		return "skip"
	}
	return "DID NOT FINISH"
}

// slowest prints the n slowest tests, top-level tests and subtests alike.
func (r *report) slowest(w io.Writer, n int) {
	ts := append([]testResult(nil), r.tests...)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].elapsed > ts[j].elapsed })
	if len(ts) > n {
		ts = ts[:n]
	}
	fmt.Fprintf(w, "\nthe %d slowest tests\n%8s  %-4s  %s\n", n, "seconds", "", "package test")
	for _, t := range ts {
		fmt.Fprintf(w, "%8.1f  %-4s  %s %s\n", t.elapsed, verdict(t.action), short(t.pkg), t.test)
	}
}

// missing returns the names in want that never started in pkg.
func (r *report) missing(pkg string, want []string) []string {
	ran := map[string]bool{}
	for _, p := range r.pkgs {
		if p.name == pkg {
			for t := range p.ran {
				ran[t] = true
			}
		}
	}
	var out []string
	for _, name := range want {
		if !ran[name] {
			out = append(out, name)
		}
	}
	return out
}

// readList reads `go test -list` output: test names, then "ok pkg 0.01s" (or "?" lines).
func readList(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "Test") || strings.HasPrefix(l, "Example") || strings.HasPrefix(l, "Fuzz") {
			names = append(names, l)
		}
	}
	return names, nil
}

func main() {
	slowest := flag.Int("slowest", 15, "how many of the slowest tests to print")
	expect := flag.String("expect", "", "a `go test -list` output: every test in it must have run in -pkg")
	pkg := flag.String("pkg", "", "the package -expect is about (import path)")
	live := flag.Bool("live", false, "read the stream on stdin and print only a line a package as it ends")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, flag.Args(), *live, *slowest, *expect, *pkg))
}

func run(stdin io.Reader, w io.Writer, files []string, live bool, n int, expect, pkg string) int {
	var r *report
	if len(files) == 0 {
		r = newReport(w)
		if err := r.read(stdin); err != nil {
			fmt.Fprintln(w, "testreport:", err)
			return 2
		}
		if live {
			return 0
		}
	} else {
		r = newReport(nil)
		for _, f := range files {
			r.label = strings.TrimSuffix(filepath.Base(f), ".json")
			fh, err := os.Open(f)
			if err != nil {
				fmt.Fprintln(w, "testreport:", err)
				return 2
			}
			err = r.read(fh)
			fh.Close()
			if err != nil {
				fmt.Fprintln(w, "testreport:", f, err)
				return 2
			}
		}
	}
	if expect != "" {
		want, err := readList(expect)
		if err != nil {
			fmt.Fprintln(w, "testreport:", err)
			return 2
		}
		if len(want) == 0 {
			fmt.Fprintf(w, "testreport: %s lists no tests\n", expect)
			return 1
		}
		if miss := r.missing(pkg, want); len(miss) > 0 {
			fmt.Fprintf(w, "testreport: %d of the %d tests of %s ran in none of the runs: %s\n",
				len(miss), len(want), short(pkg), strings.Join(miss, " "))
			return 1
		}
		fmt.Fprintf(w, "testreport: all %d tests of %s ran\n", len(want), short(pkg))
		return 0
	}
	r.failures(w)
	r.table(w)
	r.slowest(w, n)
	return 0
}
