package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestForwardedInBatches: with real gntd processes, writes sent to a
// follower reach the leader in batches (POST /2/gnt/forward): 32 clients
// at once through one follower, each job answered with its own id, every
// write on every candidate afterwards, and the follower sent fewer
// batches than writes.
func TestForwardedInBatches(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	counters := func() (batches, writes float64) {
		b, err := metricValue(follower, "gnt_api_forward_batches_total")
		if err != nil {
			t.Fatal(err)
		}
		w, err := metricValue(follower, "gnt_api_forward_batched_requests_total")
		if err != nil {
			t.Fatal(err)
		}
		return b, w
	}
	b0, w0 := counters()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients, each = 32, 10
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ids  = map[int64]bool{}
		errs []error
	)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cl := c.ClientFor(follower)
			for n := 0; n < each; n++ {
				id, _, err := cl.AddTags(ctx, "cluster", "", []string{fmt.Sprintf("fwd%d-%d", i, n)}, "")
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if ids[id] {
					errs = append(errs, fmt.Errorf("job %d answered twice", id))
				}
				ids[id] = true
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d writes failed, first: %v", len(errs), errs[0])
	}
	b1, w1 := counters()
	batches, writes := b1-b0, w1-w0
	t.Logf("%v writes through the follower in %v batches", writes, batches)
	if writes != clients*each || batches >= writes {
		t.Errorf("the follower sent %v writes in %v batches; want %d in fewer", writes, batches, clients*each)
	}
	c.WaitConverged(30 * time.Second)
	for _, m := range c.Candidates() {
		tags, err := c.ClientFor(m).ListTags(ctx, "cluster", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(tags) != clients*each {
			t.Errorf("%s holds %d cluster tags, want %d", m.Name, len(tags), clients*each)
		}
	}
}

// TestForwardedHeldInBatches: held submissions (?wait=) sent to a
// follower go to the leader in batches, and the follower waits for each
// job on its own replica: every answer carries the job's final status,
// and the follower's state holds it when the answer comes.
func TestForwardedHeldInBatches(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	w0, err := metricValue(follower, "gnt_api_forward_batched_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients, each = 16, 5
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := c.ClientFor(follower)
			for n := 0; n < each; n++ {
				delay := []map[string]any{{"OP_ID": "OP_TEST_DELAY", "duration": 0.05}}
				id, meta, err := cl.SubmitJobHeld(ctx, delay, "held through a follower", 30*time.Second)
				if err == nil && meta.JobStatus != "success" {
					err = fmt.Errorf("job %d answered with status %q, want success", id, meta.JobStatus)
				}
				if err == nil {
					// The answer came from the follower's replica, so a
					// read of it there sees the job ended too.
					job, jerr := cl.Job(ctx, id)
					if jerr != nil || job.Status != "success" {
						err = fmt.Errorf("job %d read from the follower: status %q, %v", id, job.Status, jerr)
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d held submissions went wrong, first: %v", len(errs), errs[0])
	}
	w1, err := metricValue(follower, "gnt_api_forward_batched_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	if w1-w0 != clients*each {
		t.Errorf("%v submissions went in batches, want %d", w1-w0, clients*each)
	}
}
