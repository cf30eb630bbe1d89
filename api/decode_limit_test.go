package api

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

// FuzzDecodeLimit feeds the limit body decoder (PUT /v1/queues/{queue}/limits) arbitrary
// bytes. It must never panic; a refusal is a 400 with a stable code and a message, and an
// accepted body has an interval within the library's bounds (no overflow of the Duration).
// Run it longer with
//
//	go test -fuzz=FuzzDecodeLimit ./api/
func FuzzDecodeLimit(f *testing.F) {
	for _, s := range []string{
		`{"type":"echo","per_key":true,"rate":10,"interval_ms":60000,"concurrency":2}`,
		`{"concurrency":1}`, `{}`, `{"rate":1,"interval_ms":-9223372036854775808}`,
		`{"rate":1,"interval_ms":9223372036854775807}`, `{"rate":1e30}`, `{"queue":"q"}`,
		"{\"type\":\"\xff\"}", `{"concurrency":1} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		l, err := decodeLimit(bytes.NewReader(body))
		if err != nil {
			checkDecoded(t, nil, err) // a 400 with a stable code and a message
			require.Equal(t, pipeline.Limit{}, l)
			return
		}
		require.GreaterOrEqual(t, l.Interval, time.Duration(0))
		require.LessOrEqual(t, l.Interval, maxLimitInterval)
		require.Zero(t, l.Interval%time.Millisecond)
	})
}
