package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// runOnce runs the member's gntd with extra arguments to its end (it is
// expected to refuse to start) and returns its exit code and output.
func runOnce(t *testing.T, m *Member, extra ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.Args[0], append(append([]string{}, m.Args[1:]...), extra...)...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not stop by itself within 30 s: %s", m.Name, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// raftMember reads what a member's node.json records of its membership.
func raftMember(m *Member) string {
	var id struct {
		RaftMember string `json:"raft_member"`
	}
	data, err := os.ReadFile(filepath.Join(m.DataDir, "node.json"))
	if err != nil || json.Unmarshal(data, &id) != nil {
		return ""
	}
	return id.RaftMember
}

// suffrage is the member's suffrage in the leader's configuration ("" not
// in it).
func (c *Cluster) suffrage(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	peers, err := c.Client().Peers(ctx)
	if err != nil {
		return "unknown: " + err.Error()
	}
	for _, p := range peers {
		if p.ID == name {
			return p.Suffrage
		}
	}
	return ""
}

// addTag writes one cluster tag through the CLI, which waits for its
// job: an acknowledged write.
func (c *Cluster) addTag(t *testing.T, tag string) {
	t.Helper()
	if out, err := c.GNT("cluster", "add-tags", tag); err != nil {
		t.Fatalf("add-tags %s: %v\n%s", tag, err, out)
	}
}

// localTags reads the cluster tags from the member's own replica.
func localTags(m *Member) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var tags []string
	_, err := m.c.ClientFor(m).Do(ctx, http.MethodGet, "/2/tags", nil, nil, &tags)
	return tags, err
}

// TestRaftAmnesia: a follower whose raft.db is truncated to 0 bytes
// refuses to start, saying why and what to do; started with --rejoin it
// has the leader remove it from the Raft configuration, comes back as a
// non-voter, catches up and is promoted to voter, with every write
// acknowledged before and while it was down. A raft.db with random bytes
// inside is refused with one line naming the file, no stack trace, and
// --rejoin brings that one back too, this time asking a follower, which
// forwards the rejoin to the leader.
func TestRaftAmnesia(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3})
	// node11 leads: the followers, node12 and node13, know another
	// candidate to reach the leader through (node11 only knows itself).
	if leader := c.WaitLeader(10 * time.Second); leader.Name != "node11" {
		if out, err := c.GNT("cluster", "master-failover", "--to", "node11"); err != nil {
			t.Fatalf("master-failover --to node11: %v\n%s", err, out)
		}
	}
	leader := c.WaitLeader(10 * time.Second)
	if leader.Name != "node11" {
		t.Fatalf("the leader is %s, want node11", leader.Name)
	}
	followers := c.Followers(leader)
	var acked []string
	write := func(n int) {
		for i := 0; i < n; i++ {
			tag := fmt.Sprintf("acked-%d", len(acked))
			c.addTag(t, tag)
			acked = append(acked, tag)
		}
	}
	write(10)

	for i, f := range followers {
		f := f
		spoil := []string{"truncated to 0 bytes", "random bytes inside"}[i%2]
		t.Run(spoil, func(t *testing.T) {
			c.Eventually(10*time.Second, 100*time.Millisecond, f.Name+" records its membership", func() error {
				if got := raftMember(f); got != f.Name {
					return fmt.Errorf("node.json raft_member %q", got)
				}
				return nil
			})
			f.Kill()
			db := filepath.Join(f.DataDir, "raft", "raft.db")
			switch spoil {
			case "truncated to 0 bytes":
				if err := os.Truncate(db, 0); err != nil {
					t.Fatal(err)
				}
			default:
				data, err := os.ReadFile(db)
				if err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewSource(int64(i)))
				r.Read(data[2*os.Getpagesize():])
				if err := os.WriteFile(db, data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, out := runOnce(t, f)
			t.Logf("%s started over a raft.db %s: exit %d: %s", f.Name, spoil, code, out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if code == 0 || !strings.HasPrefix(last, "gntd: refusing to start") || !strings.Contains(last, db) ||
				!strings.Contains(last, "--rejoin") || strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("want a non-zero exit and one line naming %s and --rejoin, no stack; got exit %d:\n%s", db, code, out)
			}
			if spoil == "truncated to 0 bytes" && !strings.Contains(last, "empty (0 bytes)") {
				t.Errorf("the refusal does not say the file is empty: %s", last)
			}
			if spoil != "truncated to 0 bytes" && !strings.Contains(last, "is corrupt") {
				t.Errorf("the refusal does not say the file is corrupt: %s", last)
			}
			write(5) // acknowledged while it is down

			args := f.Args
			f.Args = append(append([]string{}, args...), "--rejoin")
			if i == 1 {
				// Through a follower: its API forwards the rejoin to the
				// leader.
				for k := range f.Args {
					if f.Args[k] == "--join" {
						f.Args[k+1] = followers[0].APIAddr()
					}
				}
			}
			f.Start(t)
			f.Args = args
			var seen []string
			c.Eventually(60*time.Second, 20*time.Millisecond, f.Name+" back as a voter", func() error {
				s := c.suffrage(f.Name)
				if len(seen) == 0 || seen[len(seen)-1] != s {
					seen = append(seen, s)
				}
				if s != "voter" || !slices.Contains(seen, "nonvoter") {
					return fmt.Errorf("suffrage so far %q", seen)
				}
				return nil
			})
			t.Logf("%s's suffrage in the leader's configuration after --rejoin: %q", f.Name, seen)
			if !strings.Contains(f.Log(), "removed from the Raft configuration by the leader") {
				t.Errorf("%s did not log its removal", f.Name)
			}
			write(3)
			c.Eventually(20*time.Second, 100*time.Millisecond, f.Name+" holds every acknowledged write", func() error {
				tags, err := localTags(f)
				if err != nil {
					return err
				}
				for _, a := range acked {
					if !slices.Contains(tags, a) {
						return fmt.Errorf("%s's replica lacks %s (has %d tags)", f.Name, a, len(tags))
					}
				}
				return nil
			})
			c.Eventually(10*time.Second, 100*time.Millisecond, f.Name+" records its membership again", func() error {
				if got := raftMember(f); got != f.Name {
					return fmt.Errorf("node.json raft_member %q", got)
				}
				return nil
			})
			c.WaitConverged(20 * time.Second)
		})
	}
}
