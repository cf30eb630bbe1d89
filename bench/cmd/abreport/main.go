// Command abreport prints the paired ratios of an A/B run of cmd/compare: the -json-out files of
// both builds, given in the order they ran (A1 B1 A2 B2 ...). For each metric it prints each
// pair's A and B, their ratio A/B, and the median of those ratios, as Markdown or, with -json,
// as JSON. bench/ab.sh runs the builds and calls it; see bench/README.md.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	labelA := flag.String("a", "A", "what A is (a ref and its commit)")
	labelB := flag.String("b", "B", "what B is")
	system := flag.String("system", "conveyor", "the compare system whose figures are paired")
	asJSON := flag.Bool("json", false, "print JSON instead of Markdown")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: abreport [-a LABEL] [-b LABEL] [-system NAME] [-json] A1.json B1.json [A2.json B2.json ...]")
		flag.PrintDefaults()
	}
	flag.Parse()

	var runs []run
	for _, f := range flag.Args() {
		r, err := readRun(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "abreport:", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	rep, err := build(*labelA, *labelB, *system, runs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "abreport:", err)
		flag.Usage()
		os.Exit(2)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(os.Stderr, "abreport:", err)
			os.Exit(1)
		}
		return
	}
	writeMarkdown(os.Stdout, rep)
}
