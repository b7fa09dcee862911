package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
	subnet    atomic.Int32
)

// Binaries returns the directory holding gntd and gnt, building them into
// a temporary directory once per test binary unless GNT_BIN_DIR is set.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if d := os.Getenv("GNT_BIN_DIR"); d != "" {
			if _, err := os.Stat(filepath.Join(d, "gntd")); err == nil {
				binDir = d
				return
			}
		}
		d, err := os.MkdirTemp("", "gnt-bin-")
		if err != nil {
			buildErr = err
			return
		}
		for _, c := range []string{"gntd", "gnt"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(d, c), "github.com/gnt-cluster/gnt/cmd/"+c).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("building %s: %v\n%s", c, err, out)
				return
			}
		}
		binDir = d
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// Member is one gntd process of a test cluster.
type Member struct {
	Name      string
	IP        string
	Candidate bool
	DataDir   string
	Args      []string

	c    *Cluster
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *lockedBuffer
}

// APIAddr is the member's API address.
func (m *Member) APIAddr() string { return m.IP + ":5080" }

// Cluster is a set of gntd processes on 127.<s>.0.x addresses private to
// one test.
type Cluster struct {
	t       testing.TB
	Bin     string
	Dir     string
	Name    string
	Members []*Member
	tls     *clusterTLS // tls.go
}

// ClusterOptions shape a test cluster.
type ClusterOptions struct {
	Candidates int
	Nodes      int
	// ExtraArgs are appended to every gntd command line.
	ExtraArgs []string
	// MemberArgs, if set, gives arguments for one member's command line,
	// given its name and data dir.
	MemberArgs func(name, dataDir string) []string
}

// NewCluster starts a cluster: the first candidate initialises it, the
// others are added with `node add` and join with the copied cluster key.
// It waits until min(Candidates, 5) voters are in the Raft configuration.
func NewCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	bin := Binaries(t)
	// 127.<s>.0.x, s in [10, 250): a test binary's clusters start at an
	// offset of its pid (tests of several binaries run at once) and wrap.
	s := 10 + (subnet.Add(1)+int32(os.Getpid()%100)*2)%240
	c := &Cluster{t: t, Bin: bin, Dir: t.TempDir(), Name: "test.example.com"}
	if err := os.Mkdir(c.IAllocatorsDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(c.OOBProgramsDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	c.installOSes(t)
	extra := func(name string) []string {
		if o.MemberArgs == nil {
			return o.ExtraArgs
		}
		return append(append([]string{}, o.ExtraArgs...), o.MemberArgs(name, filepath.Join(c.Dir, name))...)
	}
	for i := 0; i < o.Candidates; i++ {
		name := fmt.Sprintf("node%d", 11+i)
		c.Members = append(c.Members, c.newMember(name, fmt.Sprintf("127.%d.0.%d", s, 11+i), true, extra(name)))
	}
	for i := 0; i < o.Nodes; i++ {
		name := fmt.Sprintf("node%d", 21+i)
		c.Members = append(c.Members, c.newMember(name, fmt.Sprintf("127.%d.0.%d", s, 21+i), false, extra(name)))
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			m.Kill()
		}
		if t.Failed() {
			for _, m := range c.Members {
				t.Logf("---- log of %s ----\n%s", m.Name, m.log.Tail(120))
			}
		}
	})
	first := c.Members[0]
	first.Start(t)
	c.WaitHTTP(first)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The first gntd has no CA until init: its certificate cannot be
	// checked yet (init is accepted from this machine only).
	cl := rpc.NewClientWith([]string{first.APIAddr()}, rpc.ClientOptions{TLS: &tls.Config{InsecureSkipVerify: true}})
	if err := cl.Init(ctx, rpc.InitRequest{ClusterName: c.Name, CandidatePoolSize: o.Candidates}); err != nil {
		t.Fatalf("cluster init: %v", err)
	}
	c.setUpTLS(first.DataDir)
	cl = c.NewClient([]string{first.APIAddr()})
	key, err := os.ReadFile(filepath.Join(first.DataDir, "cluster.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members[1:] {
		if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.DataDir, "cluster.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		mc := m.Candidate
		id, meta, err := cl.AddNode(ctx, map[string]any{"node_name": m.Name, "primary_ip": m.IP, "master_candidate": mc}, "test setup")
		if err != nil {
			t.Fatalf("node add %s: %v", m.Name, err)
		}
		if job, err := cl.WaitJob(ctx, id, meta.Index); err != nil || job.Status != "success" {
			t.Fatalf("node add %s: %v %+v", m.Name, err, job)
		}
		m.Start(t)
	}
	c.WaitVoters(min(o.Candidates, 5), 60*time.Second)
	return c
}

func (c *Cluster) newMember(name, ip string, candidate bool, extra []string) *Member {
	var joins []string
	for _, m := range c.Members {
		if m.Candidate {
			joins = append(joins, m.APIAddr())
		}
	}
	if candidate {
		joins = append(joins, ip+":5080")
	}
	dir := filepath.Join(c.Dir, name)
	args := []string{filepath.Join(c.Bin, "gntd"), "agent", "--name", name, "--bind", ip, "--data-dir", dir,
		"--profile", "dev", "--log-level", "info", "--oob-programs-dir", c.OOBProgramsDir(), "--iallocators-dir", c.IAllocatorsDir(),
		"--os-search-path", strings.Join(c.OSSearchPath(), ":")}
	if len(joins) > 0 {
		args = append(args, "--join", strings.Join(joins, ","))
	}
	args = append(args, extra...)
	return &Member{Name: name, IP: ip, Candidate: candidate, DataDir: dir, Args: args, log: &lockedBuffer{}, c: c}
}

// Start runs the member's gntd (again, after a kill) with the same command line.
func (m *Member) Start(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		select {
		case <-m.done:
		default:
			t.Fatalf("%s is already running", m.Name)
		}
	}
	cmd := exec.Command(m.Args[0], m.Args[1:]...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(m.log, "==== %s start: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(m.Args, " "))
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", m.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	m.cmd, m.done = cmd, done
}

// Kill sends SIGKILL and waits for the process to exit.
func (m *Member) Kill() { m.signal(syscall.SIGKILL, true) }

// Stop sends SIGTERM and waits.
func (m *Member) Stop() { m.signal(syscall.SIGTERM, true) }

// Pause sends SIGSTOP; Resume sends SIGCONT.
func (m *Member) Pause()  { m.signal(syscall.SIGSTOP, false) }
func (m *Member) Resume() { m.signal(syscall.SIGCONT, false) }

// Running reports whether the process is alive.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// PID is the current process id (0 when not running).
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

func (m *Member) signal(sig syscall.Signal, wait bool) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	cmd.Process.Signal(sig)
	if wait {
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		fmt.Fprintf(m.log, "==== %s stopped by %v\n", time.Now().Format(time.RFC3339Nano), sig)
	}
}

// Log returns the member's output so far.
func (m *Member) Log() string { return m.log.String() }

// OOBProgramsDir is every member's OOB programs directory (gntd
// --oob-programs-dir): a test's OOB helpers go there.
func (c *Cluster) OOBProgramsDir() string { return filepath.Join(c.Dir, "oob-programs") }

// OSDir is the cluster's own directory of OS definitions, first in every
// member's OS search path: the shipped gnt-image, and "debian", a copy of
// it without variants, for the tests that create instances with
// --os-type debian (the Ganeti habit).
func (c *Cluster) OSDir() string { return filepath.Join(c.Dir, "os") }

// OSSearchPath is every member's --os-search-path: OSDir, then Debian's
// /usr/share/ganeti/os (ganeti-os-noop).
func (c *Cluster) OSSearchPath() []string { return []string{c.OSDir(), "/usr/share/ganeti/os"} }

func (c *Cluster) installOSes(t testing.TB) {
	t.Helper()
	for _, name := range []string{osdef.BuiltinName, "debian"} {
		if err := osdef.InstallBuiltin(c.OSDir(), name); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(c.OSDir(), "debian", osdef.FileVariants)); err != nil {
		t.Fatal(err)
	}
}

// IAllocatorsDir is every member's iallocators directory (gntd
// --iallocators-dir): a test's external allocators go there.
func (c *Cluster) IAllocatorsDir() string { return filepath.Join(c.Dir, "iallocators") }

// Followers returns the candidates other than leader, in name order.
func (c *Cluster) Followers(leader *Member) []*Member {
	var out []*Member
	for _, m := range c.Candidates() {
		if m != leader {
			out = append(out, m)
		}
	}
	return out
}

// Candidates returns the candidate members.
func (c *Cluster) Candidates() []*Member {
	var out []*Member
	for _, m := range c.Members {
		if m.Candidate {
			out = append(out, m)
		}
	}
	return out
}

// leaderLossLine is what a follower logs when it stands for election
// because its leader's process is gone (server/leaderloss.go).
const leaderLossLine = "its process is gone; standing for election now"

// LoggedSince returns the members whose output written after mark (a
// length of their log, from LogLen) contains s.
func (c *Cluster) LoggedSince(mark map[*Member]int, s string) []string {
	var out []string
	for _, m := range c.Members {
		if strings.Contains(m.Log()[mark[m]:], s) {
			out = append(out, m.Name)
		}
	}
	return out
}

// LogLen returns the length of every member's log so far, for LoggedSince.
func (c *Cluster) LogLen() map[*Member]int {
	out := map[*Member]int{}
	for _, m := range c.Members {
		out[m] = len(m.Log())
	}
	return out
}

// Member finds a member by name.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	c.t.Fatalf("no member %s", name)
	return nil
}

// Servers are the candidates' API addresses.
func (c *Cluster) Servers() []string {
	var out []string
	for _, m := range c.Candidates() {
		out = append(out, m.APIAddr())
	}
	return out
}

// Client returns an API client over all candidates.
func (c *Cluster) Client() *rpc.Client { return c.NewClient(c.Servers()) }

// Status asks one member for its own status (no leader needed), with the
// hash of its state.
func (c *Cluster) Status(m *Member) (rpc.Status, error) { return c.status(m, true) }

// status asks without the hash when hash is false: hashing encodes the
// whole state under the read lock, which stalls applies on a busy member.
func (c *Cluster) status(m *Member, hash bool) (rpc.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var st rpc.Status
	q := ""
	if hash {
		q = "?hash=1"
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL(m, "/2/gnt/status"+q), nil)
	resp, err := c.HTTP().Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// Leader returns the running member that is leader with leadership
// established, or nil.
func (c *Cluster) Leader() *Member {
	for _, m := range c.Candidates() {
		if !m.Running() {
			continue
		}
		if st, err := c.status(m, false); err == nil && st.RaftState == "leader" && st.Established {
			return m
		}
	}
	return nil
}

// WaitLeader waits for an established leader.
func (c *Cluster) WaitLeader(timeout time.Duration) *Member {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %v", timeout)
	return nil
}

// WaitHTTP waits until the member's API answers.
func (c *Cluster) WaitHTTP(m *Member) {
	c.t.Helper()
	for i := 0; i < 400; i++ {
		if resp, err := insecureHTTP.Get("https://" + m.APIAddr() + "/version"); err == nil {
			resp.Body.Close()
			return
		}
		if !m.Running() {
			c.t.Fatalf("%s exited during start-up:\n%s", m.Name, m.log.Tail(40))
		}
		time.Sleep(25 * time.Millisecond)
	}
	c.t.Fatalf("%s API did not answer", m.Name)
}

// WaitVoters waits until the Raft configuration has n voters.
func (c *Cluster) WaitVoters(n int, timeout time.Duration) []rpc.Peer {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last []rpc.Peer
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		peers, err := c.Client().Peers(ctx)
		cancel()
		last, lastErr = peers, err
		voters := 0
		for _, p := range peers {
			if p.Suffrage == "voter" {
				voters++
			}
		}
		if err == nil && voters == n {
			return peers
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("want %d voters within %v; last peers %+v (err %v)", n, timeout, last, lastErr)
	return nil
}

// WaitConverged waits until every running candidate has applied the same
// index with the same state hash, and returns that hash.
func (c *Cluster) WaitConverged(timeout time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []string
	for time.Now().Before(deadline) {
		seen = seen[:0]
		hashes := map[string]bool{}
		ok := true
		for _, m := range c.Candidates() {
			if !m.Running() {
				continue
			}
			st, err := c.Status(m)
			if err != nil || !st.Candidate {
				ok = false
				break
			}
			hashes[st.FSMHash] = true
			seen = append(seen, fmt.Sprintf("%s@%d:%.12s", m.Name, st.AppliedIndex, st.FSMHash))
		}
		if ok && len(hashes) == 1 {
			for h := range hashes {
				return h
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("candidates did not converge within %v: %v", timeout, seen)
	return ""
}

// GNT runs the gnt CLI against the cluster and returns its output.
func (c *Cluster) GNT(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append([]string{"--server", strings.Join(c.Servers(), ",")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "gnt"), full...)
	cmd.Env = append(os.Environ(), "GNT_SERVER=", "HOME="+c.Dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail returns the last n lines.
func (b *lockedBuffer) Tail(n int) string { return lastLines(b.String(), n) }

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ClientFor returns an API client that talks to one member only (reads
// are then answered from that member's own replica).
func (c *Cluster) ClientFor(m *Member) *rpc.Client { return c.NewClient([]string{m.APIAddr()}) }

// Eventually calls f every interval until it returns nil or timeout
// passes; then the test fails with what and f's last error. It returns how
// long it took.
func (c *Cluster) Eventually(timeout, interval time.Duration, what string, f func() error) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %v: %v", what, timeout, err)
			return time.Since(start)
		}
		time.Sleep(interval)
	}
}

// GNTExit runs the gnt CLI like GNT and also returns its exit status
// (-1 when it could not be run or was killed).
func (c *Cluster) GNTExit(args ...string) (string, int) {
	out, err := c.GNT(args...)
	if err == nil {
		return out, 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, ee.ExitCode()
	}
	return out + "\n" + err.Error(), -1
}

// TagWriters are clients writing tags while a test does something to the
// cluster: on the cluster and on every member (each object holds at most
// fsm.MaxTagsPerObj), each client through one candidate in turn, each
// write confirmed by its job before the next.
type TagWriters struct {
	n, perWriter int
	objects      []tagObject
	stop         chan struct{}
	stopOnce     sync.Once
	wg           sync.WaitGroup

	writes, failed atomic.Int64
	mu             sync.Mutex
	failures       []string
	tagsOf         [][]string // per writer, the tags of confirmed writes
}

type tagObject struct{ kind, name string }

// StartTagWriters starts n writers of perWriter tags each, named
// prefix:writer:i, with reason as the jobs' reason; clientFor gives a
// writer's client of a candidate. They stop at Stop, after their writes,
// or when the test ends.
func (c *Cluster) StartTagWriters(t *testing.T, n, perWriter int, prefix, reason string, clientFor func(*Member) *rpc.Client) *TagWriters {
	tw := &TagWriters{n: n, perWriter: perWriter, stop: make(chan struct{}), tagsOf: make([][]string, n)}
	tw.objects = []tagObject{{fsm.TagCluster, ""}}
	for _, m := range c.Members {
		tw.objects = append(tw.objects, tagObject{fsm.TagNode, m.Name})
	}
	cands := c.Candidates()
	for w := range n {
		tw.wg.Add(1)
		go func() {
			defer tw.wg.Done()
			via := cands[w%len(cands)]
			tw.write(w, clientFor(via), via.Name, prefix, reason)
		}()
	}
	t.Cleanup(tw.Stop)
	return tw
}

// write is writer w's loop.
func (tw *TagWriters) write(w int, cl *rpc.Client, via, prefix, reason string) {
	obj := tw.objects[w%len(tw.objects)]
	for i := 0; i < tw.perWriter; i++ {
		select {
		case <-tw.stop:
			return
		default:
		}
		tag := fmt.Sprintf("%s:%d:%d", prefix, w, i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id, meta, err := cl.AddTags(ctx, obj.kind, obj.name, []string{tag}, reason)
		if err == nil {
			var job rpc.JobInfo
			if job, err = cl.WaitJob(ctx, id, meta.Index); err == nil && job.Status != fsm.StatusSuccess {
				err = fmt.Errorf("job %d is %s", id, job.Status)
			}
		}
		cancel()
		tw.writes.Add(1)
		if err != nil {
			tw.failed.Add(1)
			tw.mu.Lock()
			tw.failures = append(tw.failures, fmt.Sprintf("writer %d via %s, %s: %v", w, via, tag, err))
			tw.mu.Unlock()
			continue
		}
		tw.tagsOf[w] = append(tw.tagsOf[w], tag)
	}
}

// Writes counts the writes tried so far, failed or not.
func (tw *TagWriters) Writes() int64 { return tw.writes.Load() }

// Failed counts the writes that failed so far.
func (tw *TagWriters) Failed() int64 { return tw.failed.Load() }

// Writers is the number of writers.
func (tw *TagWriters) Writers() int { return tw.n }

// Stop stops the writers and waits for them; calling it again does
// nothing.
func (tw *TagWriters) Stop() {
	tw.stopOnce.Do(func() { close(tw.stop) })
	tw.wg.Wait()
}

// CheckNoneFailed stops the writers and fails the test if a write failed,
// naming the first five.
func (tw *TagWriters) CheckNoneFailed(t *testing.T) {
	t.Helper()
	tw.Stop()
	if tw.failed.Load() > 0 {
		t.Errorf("%d of %d writes failed; the first: %s", tw.failed.Load(), tw.writes.Load(), strings.Join(tw.failures[:min(len(tw.failures), 5)], "\n"))
	}
}

// CheckNoneLost stops the writers and reads (consistently, through cl)
// the tags of every object written: every confirmed write's tag must be
// there.
func (tw *TagWriters) CheckNoneLost(ctx context.Context, t *testing.T, cl *rpc.Client) {
	t.Helper()
	tw.Stop()
	for w := range tw.n {
		obj := tw.objects[w%len(tw.objects)]
		path := "/2/tags"
		if obj.kind == fsm.TagNode {
			path = "/2/nodes/" + obj.name + "/tags"
		}
		var tags []string
		if _, err := cl.Do(ctx, http.MethodGet, path, url.Values{"consistent": {"1"}}, nil, &tags); err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		have := map[string]bool{}
		for _, tg := range tags {
			have[tg] = true
		}
		for _, tg := range tw.tagsOf[w] {
			if !have[tg] {
				t.Fatalf("tag %s of a confirmed write is not on %s", tg, path)
			}
		}
	}
}
