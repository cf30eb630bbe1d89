package metrics

import "testing"

// The queue label is the user's queue name, for a partition's stream too.
func TestQueueOfStream(t *testing.T) {
	for key, want := range map[string]string{
		"conveyor:{emails}:stream":   "emails",
		"conveyor:{emails#3}:stream": "emails",
		"my:pre:fix:{a.b-c}:stream":  "a.b-c",
		"not a conveyor key":         "not a conveyor key",
		"conveyor:{q#notnum}:stream": "q#notnum",
	} {
		if got := queueOfStream(key); got != want {
			t.Errorf("queueOfStream(%q) = %q, want %q", key, got, want)
		}
	}
}
