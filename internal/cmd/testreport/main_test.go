package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// stream is what `go test -json` prints for a package with a passing test, a test whose
// parallel subtest failed beside one that passed, a package that passed, one with no tests and
// one that did not build.
const stream = `{"Action":"start","Package":"github.com/conveyorq/conveyor/a"}
{"Action":"run","Package":"github.com/conveyorq/conveyor/a","Test":"TestPass"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestPass","Output":"    a_test.go:3: passing chatter\n"}
{"Action":"pass","Package":"github.com/conveyorq/conveyor/a","Test":"TestPass","Elapsed":3.5}
{"Action":"run","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"run","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Good"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Good","Output":"=== PAUSE TestFail/Good\n"}
{"Action":"run","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Bad"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Bad","Output":"=== CONT  TestFail/Bad\n"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Good","Output":"    a_test.go:5: good chatter\n"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Bad","Output":"    a_test.go:6: boom\n"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Bad","Output":"--- FAIL: TestFail/Bad (7.00s)\n"}
{"Action":"fail","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Bad","Elapsed":7}
{"Action":"pass","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail/Good","Elapsed":1}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail","Output":"--- FAIL: TestFail (7.01s)\n"}
{"Action":"fail","Package":"github.com/conveyorq/conveyor/a","Test":"TestFail","Elapsed":7.01}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Output":"FAIL\tgithub.com/conveyorq/conveyor/a\t10.6s\n"}
{"Action":"fail","Package":"github.com/conveyorq/conveyor/a","Elapsed":10.6}
{"Action":"run","Package":"github.com/conveyorq/conveyor/b","Test":"TestB"}
{"Action":"pass","Package":"github.com/conveyorq/conveyor/b","Test":"TestB","Elapsed":0.2}
{"Action":"pass","Package":"github.com/conveyorq/conveyor/b","Elapsed":0.3}
{"Action":"output","Package":"github.com/conveyorq/conveyor/c","Output":"?   \tgithub.com/conveyorq/conveyor/c\t[no test files]\n"}
{"Action":"skip","Package":"github.com/conveyorq/conveyor/c","Elapsed":0}
{"ImportPath":"github.com/conveyorq/conveyor/d [github.com/conveyorq/conveyor/d.test]","Action":"build-output","Output":"d/d_test.go:3:27: undefined: undefined\n"}
{"ImportPath":"github.com/conveyorq/conveyor/d [github.com/conveyorq/conveyor/d.test]","Action":"build-fail"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/d","Output":"FAIL\tgithub.com/conveyorq/conveyor/d [build failed]\n"}
{"Action":"fail","Package":"github.com/conveyorq/conveyor/d","Elapsed":0}
`

func TestReportPrintsFailuresTableAndSlowest(t *testing.T) {
	var out bytes.Buffer
	require.Equal(t, 0, run(strings.NewReader(stream), &out, nil, false, 2, "", ""))
	got := out.String()

	// The failed subtest's lines, its parent's and the package's, in go test's order; nothing of
	// the tests that passed, and no PAUSE/CONT lines.
	require.Contains(t, got, "--- output of a (FAIL)\n"+
		"=== RUN   TestFail\n"+
		"    a_test.go:6: boom\n"+
		"--- FAIL: TestFail/Bad (7.00s)\n"+
		"--- FAIL: TestFail (7.01s)\n"+
		"FAIL\tgithub.com/conveyorq/conveyor/a\t10.6s\n")
	require.NotContains(t, got, "chatter")
	require.NotContains(t, got, "=== CONT")
	require.Contains(t, got, "d/d_test.go:3:27: undefined: undefined")

	// A line a package as it ends, then the table: the package without tests is left out.
	require.Regexp(t, `(?m)^FAIL a +10\.6s$`, got)
	require.Regexp(t, `(?m)^ok   b +0\.3s$`, got)
	require.Regexp(t, `(?m)^a +10\.6  FAIL$`, got)
	require.Regexp(t, `(?m)^b +0\.3  pass$`, got)
	require.Regexp(t, `(?m)^d +0\.0  FAIL$`, got)
	require.NotRegexp(t, `(?m)^c `, got)

	// The two slowest, subtests included, slowest first.
	slow := got[strings.Index(got, "the 2 slowest tests"):]
	require.Regexp(t, `(?s)7\.0  FAIL  a TestFail\n.*7\.0  FAIL  a TestFail/Bad\n$`, slow)
	require.NotContains(t, slow, "TestPass")
}

func TestReportFromFilesIsTheSame(t *testing.T) {
	dir := t.TempDir()
	half := strings.Index(stream, `{"Action":"run","Package":"github.com/conveyorq/conveyor/b"`)
	f1, f2 := filepath.Join(dir, "1.json"), filepath.Join(dir, "2.json")
	require.NoError(t, os.WriteFile(f1, []byte(stream[:half]), 0o600))
	require.NoError(t, os.WriteFile(f2, []byte(stream[half:]), 0o600))

	var fromStdin, fromFiles bytes.Buffer
	run(strings.NewReader(stream), &fromStdin, nil, false, 15, "", "")
	require.Equal(t, 0, run(nil, &fromFiles, []string{f1, f2}, false, 15, "", ""))
	// The same report but the live lines a package, which only a stream gets.
	require.Contains(t, fromStdin.String(), fromFiles.String())
	require.NotRegexp(t, `(?m)^ok   b`, fromFiles.String())

	// -live: the lines a package and nothing else.
	var live bytes.Buffer
	require.Equal(t, 0, run(strings.NewReader(stream), &live, nil, true, 15, "", ""))
	require.Regexp(t, `^FAIL a +10\.6s\nok   b +0\.3s\nFAIL d +0\.0s\n$`, live.String())
}

func TestExpectNamesTestsThatRanNowhere(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "a.json")
	require.NoError(t, os.WriteFile(data, []byte(stream), 0o600))
	list := filepath.Join(dir, "list.txt")

	require.NoError(t, os.WriteFile(list, []byte("TestPass\nTestFail\nok  \tgithub.com/conveyorq/conveyor/a\t0.01s\n"), 0o600))
	var out bytes.Buffer
	require.Equal(t, 0, run(nil, &out, []string{data}, false, 15, list, "github.com/conveyorq/conveyor/a"))
	require.Contains(t, out.String(), "all 2 tests of a ran")

	require.NoError(t, os.WriteFile(list, []byte("TestPass\nTestNever\nExampleNever\n"), 0o600))
	out.Reset()
	require.Equal(t, 1, run(nil, &out, []string{data}, false, 15, list, "github.com/conveyorq/conveyor/a"))
	require.Contains(t, out.String(), "2 of the 3 tests of a ran in none of the runs: TestNever ExampleNever")

	// A list with no tests in it (a -list that failed) is a failure, not a vacuous pass.
	require.NoError(t, os.WriteFile(list, []byte("FAIL\n"), 0o600))
	require.Equal(t, 1, run(nil, &out, []string{data}, false, 15, list, "github.com/conveyorq/conveyor/a"))
}

// A timeout's panic is the output of the test that was running, which never gets a result of
// its own: its lines are printed and it is named, or a timed-out run would say nothing.
func TestReportPrintsTheTestATimeoutStopped(t *testing.T) {
	const timedOut = `{"Action":"run","Package":"github.com/conveyorq/conveyor/a","Test":"TestDone"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestDone","Output":"    done chatter\n"}
{"Action":"pass","Package":"github.com/conveyorq/conveyor/a","Test":"TestDone","Elapsed":1}
{"Action":"run","Package":"github.com/conveyorq/conveyor/a","Test":"TestSlow"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestSlow","Output":"    slow_test.go:9: waiting for the worker\n"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Test":"TestSlow","Output":"panic: test timed out after 20m0s\n"}
{"Action":"output","Package":"github.com/conveyorq/conveyor/a","Output":"FAIL\tgithub.com/conveyorq/conveyor/a\t1200.1s\n"}
{"Action":"fail","Package":"github.com/conveyorq/conveyor/a","Elapsed":1200.1}
`
	var out bytes.Buffer
	require.Equal(t, 0, run(strings.NewReader(timedOut), &out, nil, false, 15, "", ""))
	require.Contains(t, out.String(), "    slow_test.go:9: waiting for the worker\npanic: test timed out after 20m0s\n"+
		"FAIL\tgithub.com/conveyorq/conveyor/a\t1200.1s\n--- never ended (running when the test binary stopped): TestSlow\n")
	require.NotContains(t, out.String(), "done chatter")
}

// One package run by two invocations (with and without -race) has a row for each, named by
// its file, and -expect counts the tests of both.
func TestReportOnePackageFromTwoRuns(t *testing.T) {
	dir := t.TempDir()
	const one = `{"Action":"run","Package":"github.com/conveyorq/conveyor/a","Test":"TestOne"}
{"Action":"pass","Package":"github.com/conveyorq/conveyor/a","Test":"TestOne","Elapsed":1}
{"Action":"pass","Package":"github.com/conveyorq/conveyor/a","Elapsed":2.5}
`
	race, plain := filepath.Join(dir, "race.json"), filepath.Join(dir, "plain.json")
	require.NoError(t, os.WriteFile(race, []byte(one), 0o600))
	require.NoError(t, os.WriteFile(plain, []byte(strings.ReplaceAll(one, "TestOne", "TestTwo")), 0o600))
	var out bytes.Buffer
	require.Equal(t, 0, run(nil, &out, []string{race, plain}, false, 15, "", ""))
	require.Regexp(t, `(?m)^a \(race\) +2\.5  pass\na \(plain\) +2\.5  pass$`, out.String())

	list := filepath.Join(dir, "list.txt")
	require.NoError(t, os.WriteFile(list, []byte("TestOne\nTestTwo\n"), 0o600))
	require.Equal(t, 0, run(nil, &out, []string{race, plain}, false, 15, list, "github.com/conveyorq/conveyor/a"))
	require.Equal(t, 1, run(nil, &out, []string{race}, false, 15, list, "github.com/conveyorq/conveyor/a"))
}
