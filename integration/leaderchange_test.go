package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFollowerHoldsWritesDuringMasterFailover: a client that talks only
// to one follower, over HTTPS with no retries of its own, keeps writing
// while the leadership moves to the other follower. The follower holds
// the writes that reach the old leader after it stepped down (it answers
// forwarded requests 503 no_leader) until it knows the new leader, up to
// the hold bound: no write is answered 503.
func TestFollowerHoldsWritesDuringMasterFailover(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	old := c.WaitLeader(10 * time.Second)
	c.WaitVoters(3, 30*time.Second)
	fs := c.Followers(old)
	writer, target := fs[0], fs[1]

	hc := c.HTTP()
	var (
		mu       sync.Mutex
		answers  = map[int]int{}
		refusals []string
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("PUT", c.URL(writer, fmt.Sprintf("/2/tags?tag=w%d-%d", i, n%4)), nil)
				resp, err := hc.Do(req)
				if err != nil {
					mu.Lock()
					refusals = append(refusals, err.Error())
					mu.Unlock()
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				answers[resp.StatusCode]++
				if resp.StatusCode != http.StatusOK {
					refusals = append(refusals, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body))))
				}
				mu.Unlock()
			}
		}(i)
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	leader, err := c.ClientFor(target).MasterFailover(ctx, target.Name)
	cancel()
	if err != nil {
		t.Fatalf("master failover to %s: %v", target.Name, err)
	}
	c.Eventually(15*time.Second, 20*time.Millisecond, "the new leader", func() error {
		if l := c.Leader(); l == nil || l.Name != leader {
			return fmt.Errorf("leader is %v", l)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("writes through %s while the leadership moved from %s to %s: %v", writer.Name, old.Name, leader, answers)
	if answers[http.StatusOK] == 0 {
		t.Fatal("no write succeeded")
	}
	for _, r := range refusals {
		t.Errorf("refused: %s", r)
	}
}
