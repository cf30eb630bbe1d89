package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A flood of concurrent POSTs against a bounded queue with no workers: exactly the bound is
// accepted (202), every other publish answers 429 with Retry-After in whole seconds and the
// queue_full code, and a batch over the room left is admitted in part, saying which jobs were
// refused.
func TestQueueFull429UnderFlood(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	for _, be := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"Standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"Cluster", func(t *testing.T) redis.UniversalClient { return cl.Client(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, setupOpts{rdb: be.rdb(t)})
			_, err := e.insp.CreateQueue(t.Context(), e.queue, pipeline.QueueOptions{})
			require.NoError(t, err)
			r := e.do("PATCH", "/v1/queues/"+e.queue+"/settings", `{"max_waiting":25,"full_policy":"reject"}`)
			require.Equal(t, 200, r.status, "%s", r.body)
			var st struct {
				MaxWaiting int    `json:"max_waiting"`
				FullPolicy string `json:"full_policy"`
			}
			r.json(t, &st)
			require.Equal(t, 25, st.MaxWaiting)
			require.Equal(t, "reject", st.FullPolicy)

			const clients, each = 16, 10
			var mu sync.Mutex
			codes := map[int]int{}
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						req, _ := http.NewRequest("POST", e.http.URL+e.jobs(), strings.NewReader(`{"type":"echo"}`))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("X-Conveyor-Request", "1")
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusTooManyRequests {
							secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
							if err != nil || secs < 1 || secs > 60 {
								t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
							}
							var b struct {
								Error struct {
									Code string `json:"code"`
								} `json:"error"`
							}
							if json.Unmarshal(body, &b) != nil || b.Error.Code != "queue_full" {
								t.Errorf("429 body %s", body)
							}
						}
						mu.Lock()
						codes[resp.StatusCode]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			require.Equal(t, map[int]int{202: 25, 429: clients*each - 25}, codes)

			// A batch: room for 2 of 3 once 2 jobs are canceled.
			zero, five := 0, 27
			_, err = e.insp.UpdateQueue(t.Context(), e.queue, pipeline.QueuePatch{MaxWaiting: &five})
			require.NoError(t, err)
			r = e.do("POST", e.jobs()+":batch", `{"jobs":[{"type":"echo"},{"type":"echo"},{"type":"echo"}]}`)
			require.Equal(t, 429, r.status, "%s", r.body)
			require.NotEmpty(t, r.header.Get("Retry-After"))
			var partial struct {
				Error struct {
					Code    string `json:"code"`
					Refused []int  `json:"refused"`
					Jobs    []struct {
						ID     string `json:"id"`
						Status string `json:"status"`
					} `json:"jobs"`
				} `json:"error"`
			}
			r.json(t, &partial)
			require.Equal(t, "queue_full", partial.Error.Code)
			require.Equal(t, []int{2}, partial.Error.Refused)
			require.Len(t, partial.Error.Jobs, 2, "the jobs written")
			for _, j := range partial.Error.Jobs {
				require.Equal(t, "queued", j.Status)
			}
			// Refused whole: one line, every index.
			r = e.do("POST", e.jobs()+":batch", `{"jobs":[{"type":"echo"},{"type":"echo"}]}`)
			require.Equal(t, 429, r.status, "%s", r.body)
			r.json(t, &partial)
			require.Equal(t, []int{0, 1}, partial.Error.Refused)
			require.NotContains(t, r.apiErr(t).Message, "\n")
			_, err = e.insp.UpdateQueue(t.Context(), e.queue, pipeline.QueuePatch{MaxWaiting: &zero})
			require.NoError(t, err)
			e.post(`{"type":"echo"}`, 202)

			r = e.do("GET", "/v1/queues/"+e.queue, "")
			require.Equal(t, 200, r.status, "%s", r.body)
			var stats struct {
				RejectedFull int64 `json:"rejected_full"`
			}
			r.json(t, &stats)
			require.EqualValues(t, clients*each-25+1+2, stats.RejectedFull)
		})
	}
}

// A limit key at its bound (max_waiting_per_key) answers 429 queue_full with Retry-After and a
// message that names the key, one job or a batch admitted in part; other keys' jobs pass.
func TestQueueFull429PerKey(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	for _, be := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"Standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"Cluster", func(t *testing.T) redis.UniversalClient { return cl.Client(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, setupOpts{rdb: be.rdb(t)})
			_, err := e.insp.CreateQueue(t.Context(), e.queue, pipeline.QueueOptions{})
			require.NoError(t, err)
			r := e.do("PATCH", "/v1/queues/"+e.queue+"/settings", `{"max_waiting_per_key":2}`)
			require.Equal(t, 200, r.status, "%s", r.body)
			var st struct {
				MaxWaitingPerKey int `json:"max_waiting_per_key"`
			}
			r.json(t, &st)
			require.Equal(t, 2, st.MaxWaitingPerKey)
			r = e.do("GET", "/v1/queues/"+e.queue+"/settings", "")
			require.Equal(t, 200, r.status, "%s", r.body)
			r.json(t, &st)
			require.Equal(t, 2, st.MaxWaitingPerKey)

			e.post(`{"type":"echo","limit_key":"acme"}`, 202)
			e.post(`{"type":"echo","limit_key":"acme"}`, 202)
			r = e.do("POST", e.jobs(), `{"type":"echo","limit_key":"acme"}`)
			require.Equal(t, 429, r.status, "%s", r.body)
			secs, err := strconv.Atoi(r.header.Get("Retry-After"))
			require.NoError(t, err)
			require.True(t, secs >= 1 && secs <= 60, "Retry-After %d", secs)
			ae := r.apiErr(t)
			require.Equal(t, "queue_full", ae.Code)
			require.Contains(t, ae.Message, `limit key "acme"`)
			e.post(`{"type":"echo","limit_key":"other"}`, 202)
			e.post(`{"type":"echo"}`, 202)

			r = e.do("POST", e.jobs()+":batch", `{"jobs":[{"type":"echo","limit_key":"other"},{"type":"echo","limit_key":"acme"},{"type":"echo","limit_key":"other"}]}`)
			require.Equal(t, 429, r.status, "%s", r.body)
			var partial struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
					Refused []int  `json:"refused"`
				} `json:"error"`
			}
			r.json(t, &partial)
			require.Equal(t, "queue_full", partial.Error.Code)
			require.Equal(t, []int{1, 2}, partial.Error.Refused)
			require.Contains(t, partial.Error.Message, `for key "acme", "other"`)
		})
	}
}
