package integration

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestUserAtOnceOnFollowers: a RAPI user added through a candidate, or
// given a new password there, is accepted at once by every other one,
// whose replica may not have applied the change yet (it catches up with
// the leader before it refuses), many times over; a wrong password is
// still refused there.
func TestUserAtOnceOnFollowers(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	followers := c.Followers(leader)
	const rounds = 25
	for i := range rounds {
		name, pw := fmt.Sprintf("user%d", i), fmt.Sprintf("pw-%d", i)
		putUser(ctx, t, c, name, pw, false)
		for _, f := range followers {
			if code, _, body := apiCall(t, c, f, name, pw, "GET", "/2/info", "", nil, ""); code != 200 {
				t.Errorf("round %d: %s just added, on %s: %d %s", i, name, f.Name, code, body)
			}
		}
		pw2 := pw + "-new"
		putUser(ctx, t, c, name, pw2, false)
		for _, f := range followers {
			if code, _, body := apiCall(t, c, f, name, pw2, "GET", "/2/info", "", nil, ""); code != 200 {
				t.Errorf("round %d: %s's new password just set, on %s: %d %s", i, name, f.Name, code, body)
			}
		}
	}
	for _, f := range followers {
		if code, _, _ := apiCall(t, c, f, "user0", "pw-0", "GET", "/2/info", "", nil, ""); code != 401 {
			t.Errorf("the old password on %s: %d, want 401", f.Name, code)
		}
	}
}
