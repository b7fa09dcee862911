package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/repair"
	"github.com/gnt-cluster/gnt/server"
)

// TestMaintdPortOnEveryCandidate: a follower's maintd port checks the
// credentials as maintd does, then redirects to the leader's maintd, which
// answers; after the leader dies, the same bookmark leads to the new one.
func TestMaintdPortOnEveryCandidate(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]

	// No credentials: 401 with the Basic challenge, marked as not maintd's.
	anon := c.AdminTLS().Clone()
	anon.Certificates, anon.ClientSessionCache = nil, nil
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: anon},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get("https://" + follower.IP + ":1816/1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" || resp.Header.Get(server.HeaderMaintdRedirect) == "" {
		t.Errorf("anonymous GET on a follower's maintd port: %d %v, want 401 with a challenge and %s", resp.StatusCode, resp.Header, server.HeaderMaintdRedirect)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://"+follower.IP+":1816/1/cancel/x", nil)
	if resp, err = hc.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous POST on a follower's maintd port: %d, want 401", resp.StatusCode)
	}

	// With the admin certificate: 307 to the leader's, which answers.
	c.Eventually(10*time.Second, 100*time.Millisecond, "the follower redirects to the leader's maintd", func() error {
		return maintdRedirects(follower, leader)
	})
	follow := &http.Client{Timeout: 5 * time.Second, Transport: c.HTTP().Transport}
	resp, err = follow.Get("https://" + follower.IP + ":1816/1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(repair.HeaderEpoch) == "" {
		t.Errorf("following the redirect: %d, epoch %q; want 200 from the leader's maintd", resp.StatusCode, resp.Header.Get(repair.HeaderEpoch))
	}

	// The leader dies: the follower's port now sends to the new leader.
	leader.Kill()
	next := c.WaitLeader(15 * time.Second)
	c.Eventually(20*time.Second, 100*time.Millisecond, "the redirect follows the new leader", func() error {
		for _, m := range c.Candidates() {
			if m == leader || m == next {
				continue
			}
			if err := maintdRedirects(m, next); err != nil {
				return fmt.Errorf("%v", err)
			}
		}
		return nil
	})
}
