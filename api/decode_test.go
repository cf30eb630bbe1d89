package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeJob feeds the job body decoder arbitrary bytes, alone and as a batch's one job.
// It must never panic; a refusal is a 400 with a stable code and a message, and an accepted
// body has a type and a payload that is compact, valid JSON. The seed corpus is
// testdata/fuzz/FuzzDecodeJob (valid and invalid bodies); run it longer with
//
//	go test -fuzz=FuzzDecodeJob ./api/
func FuzzDecodeJob(f *testing.F) {
	f.Add([]byte(`{"type":"echo","payload":{"n":1}}`))
	f.Add([]byte(`{"type":"echo","debounce":{"key":"doc-1","quiet":"2s","max_wait":"30s"}}`))
	f.Add([]byte(`{"type":"echo","debounce":{"key":"","quiet":"-1s","max_wait":"x"},"delay":"1s"}`))
	f.Add([]byte(`{"type":"echo","run_at":"2026-12-01T09:00:00.0005+02:00"}`))
	f.Add([]byte(`{"type":"echo","run_at":1767225600000}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeJob(bytes.NewReader(body), "")
		checkDecoded(t, req, err)

		batch := append(append([]byte(`{"jobs":[`), body...), "]}"...)
		reqs, err := decodeBatch(bytes.NewReader(batch), "key")
		if err == nil {
			require.NotEmpty(t, reqs)
			for _, req := range reqs {
				checkDecoded(t, req, nil)
			}
		} else {
			checkDecoded(t, nil, err)
		}
	})
}

// FuzzDecodeBatch feeds the batch decoder, which reads the array one job at a time, arbitrary
// bytes and compares it with decoding the body whole (decodeBatchWhole, what it replaced): the
// two accept the same bodies with the same jobs, except that the streaming one checks each job
// as it reads it, so a body whose "jobs" field comes twice may be refused for a job of the
// first array, which the whole decoder drops. Seeds are testdata/fuzz/FuzzDecodeBatch; run it
// longer with
//
//	go test -fuzz=FuzzDecodeBatch ./api/
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"jobs":[{"type":"echo","payload":{"n":1}},{"type":"b","id":"x"}]}`))
	f.Add([]byte(`{"JOBS":[{"type":"a"}],"jobs":null}`))
	f.Add([]byte(`{"jobs":[{"type":"a","metadata":{"k":"v","k":"w"}}]} `))
	f.Add([]byte("{\"jobs\":[{\"type\":\"a\xff\"}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		reqs, err := decodeBatch(bytes.NewReader(body), "key")
		whole, wholeErr := decodeBatchWhole(body, "key")
		if err != nil {
			checkDecoded(t, nil, err)
			if wholeErr == nil {
				require.GreaterOrEqual(t, jobsFields(body), 2, "refused what the whole decoder accepts: %v", err)
			}
			return
		}
		require.NoError(t, wholeErr, "accepted what the whole decoder refuses")
		require.NotEmpty(t, reqs)
		require.LessOrEqual(t, len(reqs), MaxBatchJobs)
		require.Len(t, reqs, len(whole))
		for i, req := range reqs {
			checkDecoded(t, req, nil)
			require.Equal(t, whole[i].task, req.task, "jobs[%d]", i)
			require.Len(t, req.opts, len(whole[i].opts), "jobs[%d]", i)
		}
	})
}

// decodeBatchWhole is the batch decoder as it was: the body read whole, checked for UTF-8,
// decoded at once, counted, then each job checked.
func decodeBatchWhole(body []byte, idemKey string) ([]*jobRequest, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("not UTF-8")
	}
	var b struct {
		Jobs []jobBody `json:"jobs"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one value")
	}
	if len(b.Jobs) == 0 || len(b.Jobs) > MaxBatchJobs {
		return nil, errors.New("job count")
	}
	reqs := make([]*jobRequest, len(b.Jobs))
	for i := range b.Jobs {
		key := ""
		if idemKey != "" && b.Jobs[i].ID == "" {
			key = fmt.Sprintf("%s.%d", idemKey, i)
		}
		req, err := b.Jobs[i].request(key)
		if err != nil {
			return nil, err
		}
		reqs[i] = req
	}
	return reqs, nil
}

// jobsFields counts the top-level fields of a JSON object body that name "jobs" in any case.
func jobsFields(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0
	}
	n := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return n
		}
		if k, ok := key.(string); ok && strings.EqualFold(k, "jobs") {
			n++
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return n
		}
	}
	return n
}

func checkDecoded(t *testing.T, req *jobRequest, err error) {
	t.Helper()
	if err != nil {
		var ae *apiError
		require.True(t, errors.As(err, &ae), "%T %v", err, err)
		require.Equal(t, http.StatusBadRequest, ae.Status, ae.Message)
		require.Contains(t, []string{CodeInvalidBody, CodeInvalidArgument}, ae.Code)
		require.NotEmpty(t, ae.Message)
		require.Nil(t, req)
		return
	}
	require.NotNil(t, req)
	require.NotEmpty(t, req.task.Type)
	if req.task.Payload != nil {
		require.True(t, json.Valid(req.task.Payload), "%q", req.task.Payload)
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, req.task.Payload))
		require.Equal(t, compact.Bytes(), req.task.Payload)
	}
}

func TestDecodeJob(t *testing.T) {
	t.Parallel()
	req, err := decodeJob(bytes.NewReader([]byte(`{"type":"echo","payload":{ "a" : [1, 2] },"metadata":{"k":"v"},
		"delay":"1s","max_retries":0,"timeout":"2s","retention":"0s","unique":{"key":"u"}}`)), "idem-1")
	require.NoError(t, err)
	require.Equal(t, "echo", req.task.Type)
	require.Equal(t, `{"a":[1,2]}`, string(req.task.Payload))
	require.Equal(t, map[string]string{"k": "v"}, req.task.Metadata)
	require.Len(t, req.opts, 6, "id, delay, max_retries, timeout, retention, unique")
}

// TestDecodeDebounce: the debounce object's refusals at the edge, each naming the field.
func TestDecodeDebounce(t *testing.T) {
	t.Parallel()
	req, err := decodeJob(strings.NewReader(`{"type":"echo","debounce":{"key":"doc-1","quiet":"2s","max_wait":"30s"}}`), "")
	require.NoError(t, err)
	require.Len(t, req.opts, 1)
	for body, want := range map[string]string{
		`{"type":"e","debounce":{"quiet":"1s","max_wait":"1s"}}`:                                "debounce.key is required",
		`{"type":"e","debounce":{"key":"k","max_wait":"1s"}}`:                                   "debounce.quiet and debounce.max_wait are required",
		`{"type":"e","debounce":{"key":"k","quiet":"1s"}}`:                                      "debounce.quiet and debounce.max_wait are required",
		`{"type":"e","debounce":{"key":"k","quiet":"soon","max_wait":"1s"}}`:                    `debounce.quiet "soon" is not a duration`,
		`{"type":"e","debounce":{"key":"k","quiet":"1s","max_wait":"1"}}`:                       `debounce.max_wait "1" is not a duration`,
		`{"type":"e","debounce":{"key":"k","quiet":"1s","max_wait":"1s","extra":1}}`:            "extra",
		`{"type":"e","debounce":{"key":"k","quiet":"1s","max_wait":"1s"},"id":"x"}`:             "debounce with id",
		`{"type":"e","debounce":{"key":"k","quiet":"1s","max_wait":"1s"},"run_at":1}`:           "debounce with delay or run_at",
		`{"type":"e","debounce":{"key":"k","quiet":"1s","max_wait":"1s"},"unique":{"key":"u"}}`: "debounce with unique",
		`{"type":"e","debounce":"k"}`:                                                           "debounce",
	} {
		_, err := decodeJob(strings.NewReader(body), "")
		require.ErrorContains(t, err, want, body)
	}
	_, err = decodeJob(strings.NewReader(`{"type":"e","debounce":{"key":"k","quiet":"1s","max_wait":"1s"}}`), "idem")
	require.ErrorContains(t, err, "Idempotency-Key")
}

// A batch body is refused at its 1,001st job, and decoding any body of up to the batch limit
// allocates a small multiple of that limit: the whole array was decoded before the count was
// checked, and 16 MiB of {} took the server to 1.99 GB, of 1,1,1 to 2.97 GB. Not parallel: it
// reads the process's allocation counters.
func TestDecodeBatchMemoryBounded(t *testing.T) {
	const limit = DefaultMaxBatchBodyBytes
	// fill is head, then elem with sep between as many times as size allows, then tail.
	fill := func(size int, head, elem, sep, tail string) []byte {
		n := (size - len(head) - len(tail) + len(sep)) / (len(elem) + len(sep))
		b := append([]byte(head), bytes.Repeat([]byte(elem+sep), n)...)
		return append(b[:len(b)-len(sep)], tail...)
	}
	// meta is a job whose metadata has as many distinct keys as size allows.
	meta := func(size int) []byte {
		b := []byte(`{"jobs":[{"type":"a","metadata":{`)
		for i := 0; len(b) < size-32; i++ {
			b = append(strconv.AppendInt(append(b, `"k`...), int64(i), 10), `":"",`...)
		}
		return append(b, `"z":""}}]}`...)
	}
	// One value as large as the body costs the same multiple of it at any size: those run at
	// a quarter of the limit, which the race detector decodes four times sooner.
	const one = limit / 4
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"EmptyObjects", fill(limit, `{"jobs":[`, `{}`, ",", `]}`), "jobs[0]: type is required"},
		{"Numbers", fill(limit, `{"jobs":[`, `1`, ",", `]}`), "jobs[0]: want a JSON object"},
		{"Jobs", fill(limit, `{"jobs":[`, `{"type":"a"}`, ",", `]}`), "at least 1001 jobs"},
		{"Unterminated", fill(limit, `{"jobs":[`, `{"type":"a"}`, ",", ``), "at least 1001 jobs"},
		{"NestedPayload", fill(one, `{"jobs":[{"type":"a","payload":[`, `[1]`, ",", `]}]}`), ""},
		{"BigString", fill(one, `{"jobs":[{"type":"a","payload":"`, `x`, "", `"}]}`), ""},
		{"Metadata", meta(one), "metadata has at least 65 entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.LessOrEqual(t, len(tc.body), limit)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			reqs, err := decodeBatch(bytes.NewReader(tc.body), "")
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			ratio := float64(alloc) / float64(len(tc.body))
			t.Logf("%d bytes of body, %d allocated (%.1fx), %d jobs, err %v", len(tc.body), alloc, ratio, len(reqs), err)
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
			} else {
				require.NoError(t, err)
			}
			// One value as large as the body is read whole into the decoder's buffer, which
			// doubles as it grows (up to 4x the value allocated over its growth, by where the
			// size falls between powers of two), and the payload is copied once, compacted.
			require.LessOrEqual(t, ratio, 8.0, "decoding allocated %.1fx the body", ratio)
		})
	}
}

// The UTF-8 check holds back a character that a read cuts, and names the first bad byte
// however the body arrives.
func TestDecodeUTF8AcrossReads(t *testing.T) {
	t.Parallel()
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"Whole": func(r io.Reader) io.Reader { return r }, "OneByte": iotest.OneByteReader,
		"Half": iotest.HalfReader, "DataErr": iotest.DataErrReader,
	} {
		t.Run(name, func(t *testing.T) {
			req, err := decodeJob(wrap(strings.NewReader(`{"type":"é€😀","metadata":{"k":"\u00e9é"}}`)), "")
			require.NoError(t, err)
			require.Equal(t, "é€😀", req.task.Type)
			require.Equal(t, "éé", req.task.Metadata["k"])
			for body, at := range map[string]string{
				"{\"type\":\"é\xff\"}":        "byte 11",
				"{\"type\":\"a\"}\xe2\x82":    "byte 12",
				"{\"type\":\"\xe2\x82a\"}":    "byte 9",
				"{\"type\":\"\xed\xa0\x80\"}": "byte 9", // a surrogate
			} {
				_, err := decodeJob(wrap(strings.NewReader(body)), "")
				require.ErrorContains(t, err, "not valid UTF-8 ("+at+")", "%q", body)
			}
		})
	}
}
