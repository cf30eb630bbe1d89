package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// writeJobWithLogs writes the job's JSON object (status --json) with the field "logs" added
// last, so that the job's own fields keep their order.
func writeJobWithLogs(w io.Writer, j *pipeline.Job, ls []pipeline.AttemptLog) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if ls == nil {
		ls = []pipeline.AttemptLog{}
	}
	l, err := json.Marshal(ls)
	if err != nil {
		return err
	}
	b = append(b[:len(b)-1], `,"logs":`...)
	b = append(append(b, l...), '}', '\n')
	_, err = w.Write(b)
	return err
}

// printLogs writes a job's logs under "logs:", an attempt at a time, each line as zerolog's
// console writer shows it (a line that is not zerolog's JSON, as it is).
func printLogs(w io.Writer, ls []pipeline.AttemptLog) error {
	if len(ls) == 0 {
		_, err := fmt.Fprintln(w, "logs: none")
		return err
	}
	fmt.Fprintln(w, "logs:")
	for _, a := range ls {
		head := fmt.Sprintf("  attempt %d (%s)", a.Attempt, status.AttemptWord(a.Outcome))
		if a.Cut > 0 {
			head += fmt.Sprintf(", %d earlier lines cut", a.Cut)
		}
		fmt.Fprintln(w, head+":")
		for _, line := range a.Lines {
			fmt.Fprintln(w, "    "+consoleLine(line))
		}
	}
	return nil
}

// consoleLine is a logged line as zerolog's console writer prints it, without colour.
func consoleLine(line string) string {
	var b bytes.Buffer
	cw := zerolog.ConsoleWriter{Out: &b, NoColor: true, TimeFormat: "15:04:05"}
	if _, err := cw.Write([]byte(line)); err != nil || b.Len() == 0 {
		return line
	}
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}
