package rpc_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"
)

// fakeLeader answers GET /version with an X-Gnt-Index, as a leader does,
// and then runs onAsk (a change the follower's replica applies only after
// the leader was asked: the follower must wait for it).
type fakeLeader struct {
	mu    sync.Mutex
	index uint64
	onAsk func()
	asks  int
	other int // requests for anything else
}

func (l *fakeLeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	if r.URL.Path != "/version" {
		l.other++
		l.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	l.asks++
	idx, fn := l.index, l.onAsk
	l.onAsk = nil
	l.mu.Unlock()
	w.Header().Set(rpc.HeaderIndex, strconv.FormatUint(idx, 10))
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if fn != nil {
		fn()
	}
}

func basicAuth(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}

// TestAuthCatchUp: a follower that does not know a user, or knows an
// older record of it (another password, read access only), catches up
// with the leader's applied index once before it refuses; credentials
// the leader does not know either are refused after that one wait,
// counted once; the leader never asks, and a wait for an index that
// never comes ends at AuthCatchUp.
func TestAuthCatchUp(t *testing.T) {
	newPW := "n3w-pw"
	newHash, err := bcrypt.GenerateFromPassword([]byte(newPW), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := func(list ...fsm.RAPIUser) fsm.Command { return fsm.RAPIUsersReplace{Now: 2, Users: list} }
	reader := fsm.RAPIUser{Name: "reader", Scheme: fsm.SchemeHA1, Hash: rpc.HA1("reader", readerPW), Read: true}
	jack := fsm.RAPIUser{Name: "jack", Scheme: fsm.SchemeBcrypt, Hash: string(newHash), Read: true}
	for _, tc := range []struct {
		name       string
		leader     bool   // the gntd is the leader itself
		election   bool   // no leader is known when the request comes
		change     bool   // the leader's change reaches the replica after the leader is asked
		ahead      uint64 // the leader's index beyond the replica's after the change
		method     string // GET /2/info, or PUT /2/tags (write access)
		user, pw   string
		wantStatus int    // 0: let through
		wantReason string // the refusal counted
		wantAsks   int
	}{
		{name: "user added on the leader", change: true, user: "jack", pw: newPW, wantAsks: 1},
		{name: "password changed on the leader", change: true, user: "reader", pw: "changed", wantAsks: 1},
		{name: "write access given on the leader", change: true, method: "PUT", user: "reader", pw: readerPW, wantAsks: 1},
		{name: "unknown everywhere", user: "mallory", pw: "x", wantStatus: 401, wantReason: "unknown_user", wantAsks: 1},
		{name: "wrong password everywhere", user: "reader", pw: "guess", wantStatus: 401, wantReason: "bad_password", wantAsks: 1},
		{name: "read access everywhere", method: "PUT", user: "reader", pw: readerPW, wantStatus: 403, wantReason: "read_only", wantAsks: 1},
		{name: "leader never waits", leader: true, change: true, user: "jack", pw: newPW, wantStatus: 401, wantReason: "unknown_user"},
		{name: "an index that never comes", change: true, ahead: 100, user: "mallory", pw: "x", wantStatus: 401, wantReason: "unknown_user", wantAsks: 1},
		{name: "during an election", election: true, change: true, user: "jack", pw: newPW, wantAsks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := rpctest.New("node2")
			if err := fb.Init(context.Background(), rpc.InitRequest{ClusterName: "cluster.example.com"}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := fb.ApplyCommand(users(reader)); err != nil {
				t.Fatal(err)
			}
			l := &fakeLeader{index: fb.FSM().Index()}
			if tc.change {
				l.index += 1 + tc.ahead
				l.onAsk = func() {
					upd := reader
					switch {
					case tc.method == "PUT":
						upd.Write = true
					case tc.pw == "changed":
						upd.Hash = rpc.HA1("reader", "changed")
					}
					if resp, _, err := fb.ApplyCommand(users(upd, jack)); err != nil || resp.Err != nil {
						t.Errorf("applying the change: %v %v", err, resp.Err)
					}
				}
			}
			ls := httptest.NewServer(l)
			defer ls.Close()
			wait := 200 * time.Millisecond
			switch {
			case tc.leader:
				fb.SetLeader("", "node2", true)
			case tc.election:
				// A leader becomes known while the request waits (well
				// within its bound, however slow the machine).
				wait = time.Minute
				fb.SetLeader("", "", false)
				go func() {
					time.Sleep(50 * time.Millisecond)
					fb.SetLeader(ls.URL, "node1", false)
				}()
			default:
				fb.SetLeader(ls.URL, "node1", false)
			}
			srv, reg := authServerWith(t, fb, rpc.ServerOptions{AuthCatchUp: wait})
			method, path := "GET", "/2/info"
			if tc.method == "PUT" {
				method, path = "PUT", "/2/tags?tag=x"
			}
			rec := serve(srv.Handler(), method, path, nil, "Authorization", basicAuth(tc.user, tc.pw))
			if tc.wantStatus != 0 && rec.Code != tc.wantStatus || tc.wantStatus == 0 && (rec.Code == 401 || rec.Code == 403) {
				t.Errorf("answer %d %s, want %d (0: let through)", rec.Code, rec.Body, tc.wantStatus)
			}
			for _, reason := range []string{"unknown_user", "bad_password", "read_only"} {
				want := 0.0
				if reason == tc.wantReason {
					want = 1
				}
				if got := testutil.ToFloat64(authFailures(t, reg, reason)); got != want {
					t.Errorf("failures %s = %v, want %v", reason, got, want)
				}
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.asks != tc.wantAsks {
				t.Errorf("the leader was asked %d times, want %d", l.asks, tc.wantAsks)
			}
		})
	}
}
