package rpc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
)

// streamEnv is a cluster of 40 nodes, 400 instances (secondaries, NICs,
// tags with characters json.Marshal escapes), runtime entries, and jobs
// active, finished and archived: its bulk answers are several times the
// stream's buffer.
func streamEnv(t *testing.T) (*env, *rpctest.Backend) {
	t.Helper()
	b := rpctest.NewCluster()
	for i := 2; i <= 40; i++ {
		addNode(t, b, fmt.Sprintf("node%d", i), fmt.Sprintf("192.0.2.%d", i))
	}
	nodes := readState(b, func(st *fsm.State) []*fsm.Node { return st.SortedNodes() })
	var insts []fsm.Instance
	for i := 0; i < 400; i++ {
		p, sn := nodes[i%len(nodes)], nodes[(i+1)%len(nodes)]
		inst := fsm.Instance{Name: fmt.Sprintf("inst%03d", i), UUID: fmt.Sprintf("u-%03d", i), PrimaryNode: p.UUID,
			OS: "debian", AdminState: []string{"up", "down", "offline"}[i%3], DiskTemplate: "plain",
			MemoryMiB: 128 + int64(i), VCPUs: 1 + i%4, Tags: []string{"t<&>" + strconv.Itoa(i%7), "web"},
			Disks: []fsm.Disk{{UUID: fmt.Sprintf("d-%03d", i), SizeMiB: 1024, Mode: "rw"}},
			NICs:  []fsm.NIC{{UUID: fmt.Sprintf("n-%03d", i), MAC: fmt.Sprintf("aa:00:00:00:%02x:%02x", i/256, i%256)}}}
		if i%5 == 0 {
			inst.DiskTemplate = "drbd"
			inst.SecondaryNodes = []string{sn.UUID}
		}
		insts = append(insts, inst)
	}
	if err := b.AddInstances(insts...); err != nil {
		t.Fatal(err)
	}
	b.SetRuntime(nodes[0].UUID, rpc.NodeRuntime{At: b.Now(), Driver: "fake",
		Instances: map[string]rpc.NodeInstanceStatus{"u-000": {State: rpc.NodeStateRunning, MemoryMiB: 128, VCPUs: 1}}})
	b.SetRuntime(nodes[1].UUID, rpc.NodeRuntime{At: b.Now(), Err: "unreachable"})
	e := newEnv(t, b)
	// Finish and archive a few of the node-adding jobs.
	for id := int64(1); id <= 6; id++ {
		if j := jobOf(b, id); j != nil && !fsm.Finalized(j.Status) {
			if err := b.UpdateJob(id, 0, fsm.ActionFinish, fsm.StatusSuccess, nil); err != nil {
				t.Fatal(err)
			}
		}
		if id <= 3 {
			mustOK(t, e.do("POST", fmt.Sprintf("/2/gnt/jobs/%d/archive", id), ""))
		}
	}
	return e, b
}

// streamedPaths are the answers encoded item by item.
var streamedPaths = []string{
	"/2/nodes", "/2/nodes?bulk=1", "/2/instances", "/2/instances?bulk=1", "/2/groups", "/2/groups?bulk=1",
	"/2/jobs", "/2/jobs?bulk=1", "/2/jobs?bulk=1&archived=1", "/2/jobs?archived=1",
	"/2/query/instance?fields=name,status,oper_state,pnode,snodes,tags,nic.macs,be/memory,nosuch",
	"/2/query/instance?fields=name,tags&filter=" + url.QueryEscape(`admin_state == "up" and "web" in tags`),
	"/2/query/node?fields=name,mfree,pinst_list,sinst_cnt,role,offline",
	"/2/query/group?fields=name,node_list", "/2/query/job?fields=id,status,summary",
	"/2/query/filter?fields=uuid", "/2/query/network?fields=name,map",
}

// TestStreamedAnswersAsWhole: every streamed answer has exactly the bytes
// the whole-answer encoding gave (the RAPI conformance and Ganeti's
// client depend on them), large answers in pieces and small ones whole
// with their length.
func TestStreamedAnswersAsWhole(t *testing.T) {
	e, b := streamEnv(t)
	for _, p := range streamedPaths {
		want, err := rpc.WholeAnswer(b, p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		r := e.do("GET", p, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %s", p, r)
		}
		if !bytes.Equal(r.body, want) {
			t.Errorf("GET %s: streamed answer differs from the whole one at byte %d of %d/%d:\n%.300s\nwant\n%.300s",
				p, firstDiff(r.body, want), len(r.body), len(want), r.body[min(firstDiff(r.body, want), len(r.body)):],
				want[min(firstDiff(r.body, want), len(want)):])
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q", p, ct)
		}
		if r.header.Get(rpc.HeaderIndex) == "" {
			t.Errorf("GET %s: no %s header", p, rpc.HeaderIndex)
		}
		if cl := r.header.Get("Content-Length"); len(want) <= 64<<10 && cl != strconv.Itoa(len(want)) {
			t.Errorf("GET %s: a small answer (%d bytes) has Content-Length %q", p, len(want), cl)
		}
	}
	if n := len(mustWhole(t, b, "/2/instances?bulk=1")); n <= 4*64<<10 {
		t.Fatalf("the bulk instance answer is %d bytes: too small to stream in pieces", n)
	}
	// PUT /2/query answers as GET does.
	want := mustWhole(t, b, "/2/query/node?fields=name,pinst_cnt")
	r := e.do("PUT", "/2/query/node", `{"fields":["name","pinst_cnt"]}`)
	if r.status != http.StatusOK || !bytes.Equal(r.body, want) {
		t.Errorf("PUT /2/query/node: %d, %d bytes, want %d", r.status, len(r.body), len(want))
	}
}

func mustWhole(t *testing.T, b *rpctest.Backend, p string) []byte {
	t.Helper()
	w, err := rpc.WholeAnswer(b, p)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestStreamedAnswersDuringWrites: bulk answers read a frozen view while
// writes go on (run with -race): each answer is whole and valid, with as
// many instances as the state had when it was taken.
func TestStreamedAnswersDuringWrites(t *testing.T) {
	e, b := streamEnv(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 150; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := tryAddNode(b, fmt.Sprintf("late%d", i), fmt.Sprintf("10.1.%d.%d", i/250, 1+i%250)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 3; i++ {
		for _, p := range []string{"/2/instances?bulk=1", "/2/nodes?bulk=1", "/2/jobs?bulk=1", "/2/query/node?fields=name"} {
			r := e.do("GET", p, "")
			if r.status != http.StatusOK {
				t.Fatalf("GET %s: %s", p, r)
			}
			var v any
			if err := json.Unmarshal(r.body, &v); err != nil {
				t.Fatalf("GET %s during writes: %v", p, err)
			}
		}
	}
	close(stop)
	wg.Wait()
}

// TestStreamedAnswerErrors: a request refused before the answer starts
// is an HTTP error, as before.
func TestStreamedAnswerErrors(t *testing.T) {
	e := newEnv(t, rpctest.New("node1")) // not initialised
	for _, p := range []string{"/2/instances?bulk=1", "/2/query/instance?fields=name", "/2/query/network?fields=name"} {
		r := e.do("GET", p, "")
		if r.status < 400 || r.apiError(t).Message == "" {
			t.Errorf("GET %s on an uninitialised cluster: %s", p, r)
		}
	}
	e2, _ := streamEnv(t)
	if r := e2.do("GET", "/2/instances?bulk=maybe", ""); r.status != http.StatusBadRequest {
		t.Errorf("bulk=maybe: %s", r)
	}
}

// BenchmarkBulkInstances answers GET /2/instances?bulk=1 on 1,000 nodes
// and 20,000 instances, streamed to a client that reads as it comes
// (stream) and as it was answered before, built whole under the read
// lock (whole). peak-heap-MB is the most live heap seen during a request
// (sampled every millisecond, after a collection before it).
func BenchmarkBulkInstances(b *testing.B) {
	be := rpctest.NewCluster()
	for i := 2; i <= 1000; i++ {
		if err := tryAddNode(be, fmt.Sprintf("node%d", i), fmt.Sprintf("10.2.%d.%d", i/250, 1+i%250)); err != nil {
			b.Fatal(err)
		}
	}
	nodes := readState(be, func(st *fsm.State) []*fsm.Node { return st.SortedNodes() })
	insts := make([]fsm.Instance, 20000)
	for i := range insts {
		insts[i] = fsm.Instance{Name: fmt.Sprintf("bi%05d", i), UUID: fmt.Sprintf("u-%05d", i), PrimaryNode: nodes[i%len(nodes)].UUID,
			OS: "debian", AdminState: "down", DiskTemplate: "diskless", MemoryMiB: 128, VCPUs: 1, Forthcoming: true}
	}
	if err := be.AddInstances(insts...); err != nil {
		b.Fatal(err)
	}
	h := rpc.NewServer(be, rpc.ServerOptions{AuthDisabled: true, HoldTimeout: testHold}).Handler()
	run := func(b *testing.B, answer func() int) {
		var peak uint64
		for b.Loop() {
			runtime.GC()
			stop, done := make(chan struct{}), make(chan uint64)
			go func() {
				s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
				var max uint64
				t := time.NewTicker(time.Millisecond)
				defer t.Stop()
				for {
					metrics.Read(s)
					max = maxOf(max, s[0].Value.Uint64())
					select {
					case <-stop:
						done <- max
						return
					case <-t.C:
					}
				}
			}()
			b.SetBytes(int64(answer()))
			close(stop)
			peak = maxOf(peak, <-done)
		}
		b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
	}
	b.Run("stream", func(b *testing.B) {
		run(b, func() int {
			w := &countingResponse{header: http.Header{}}
			h.ServeHTTP(w, httptest.NewRequest("GET", "/2/instances?bulk=1", nil))
			return w.n
		})
	})
	b.Run("whole", func(b *testing.B) {
		run(b, func() int {
			body, err := rpc.WholeAnswer(be, "/2/instances?bulk=1")
			if err != nil {
				b.Fatal(err)
			}
			return len(body)
		})
	})
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// countingResponse is a client that reads an answer as it comes and
// keeps nothing of it but its length.
type countingResponse struct {
	header http.Header
	n      int
}

func (c *countingResponse) Header() http.Header         { return c.header }
func (c *countingResponse) WriteHeader(int)             {}
func (c *countingResponse) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }
