package pipeline

import (
	"reflect"
	"strings"

	"github.com/conveyorq/conveyor/status"
)

// gaugeFields maps a gauged status's word to its QueueStats field, found by the field's JSON
// name, so that a new gauge is a field and nothing else here.
var gaugeFields = func() map[string]int {
	out := map[string]int{}
	t := reflect.TypeFor[QueueStats]()
	for i := range t.NumField() {
		out[t.Field(i).Tag.Get("json")] = i
	}
	return out
}()

// Gauge returns how many of the queue's jobs are in status st now; ok is false for a status
// no gauge counts (completed, canceled).
func (s *QueueStats) Gauge(st status.Status) (n int64, ok bool) {
	in, _ := status.Describe(st)
	i, found := gaugeFields[st.Word()]
	if !in.Gauge || !found {
		return 0, false
	}
	return reflect.ValueOf(s).Elem().Field(i).Int(), true
}

// orList spells ss as "a, b or c", for messages that name the choices.
func orList(ss []status.Status) string {
	words := make([]string, len(ss))
	for i, s := range ss {
		words[i] = string(s)
	}
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
