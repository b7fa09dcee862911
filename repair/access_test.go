package repair

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAccessOf: every maintd route and method, classified. POST
// /1/cancel/ID writes; every GET (and HEAD) reads; any other method, on
// any path, needs write access.
func TestAccessOf(t *testing.T) {
	reads := []string{"/", "/1", "/1/status", "/1/jobs", "/1/evacuated", "/1/plan", "/1/cancel/inc-1", "/nope"}
	for _, p := range reads {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			if a := AccessOf(httptest.NewRequest(m, p, nil)); a != AccessRead {
				t.Errorf("%s %s: %s, want read", m, p, a)
			}
		}
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "BREW"} {
			if a := AccessOf(httptest.NewRequest(m, p, nil)); a != AccessWrite {
				t.Errorf("%s %s: %s, want write", m, p, a)
			}
		}
	}
	if a := AccessOf(httptest.NewRequest(http.MethodPost, "/1/cancel/inc-1", nil)); a != AccessWrite || a.String() != "write" {
		t.Errorf("POST /1/cancel/ID: %s", a)
	}
}

// users is an Authorize hook in the manner of the RAPI users: "reader"
// may read, "writer" may read and write, anyone else is asked for
// credentials. It records what each request was classified as.
type users struct {
	seen      map[string]bool // "METHOD path" -> write
	challenge string          // the WWW-Authenticate it sets itself, if any
}

func (u *users) authorize(w http.ResponseWriter, r *http.Request, write bool) bool {
	u.seen[r.Method+" "+r.URL.Path] = write
	name, pw, ok := r.BasicAuth()
	switch {
	case ok && name == "writer" && pw == "w":
		return true
	case ok && name == "reader" && pw == "r":
		if !write {
			return true
		}
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "reader may not write"})
		return false
	case ok && name == "silent":
		return false // refused without an answer
	}
	if u.challenge != "" {
		w.Header().Set("WWW-Authenticate", u.challenge)
	}
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "authentication required"})
	return false
}

// TestMaintdAuthorize: every route × anonymous, read and write user goes
// through the hook with its classification; refused requests change
// nothing; a 401 carries a basic-auth challenge (so that a browser asks
// for credentials on the web page) unless the hook set its own.
func TestMaintdAuthorize(t *testing.T) {
	sc, svc, _ := httpScenario(t)
	u := &users{seen: map[string]bool{}}
	svc.Authorize = u.authorize
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	do := func(method, path, user, pw, accept, origin string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	before := sc.f.Hash()
	reads := []string{"/", "/1", "/1/status", "/1/jobs", "/1/evacuated", "/1/plan"}
	for _, p := range reads {
		for _, c := range []struct {
			user, pw string
			status   int
		}{{"", "", 401}, {"reader", "wrong", 401}, {"reader", "r", 200}, {"writer", "w", 200}, {"silent", "", 403}} {
			resp, body := do("GET", p, c.user, c.pw, "", "")
			if resp.StatusCode != c.status {
				t.Errorf("GET %s as %q: %d %s, want %d", p, c.user, resp.StatusCode, body, c.status)
			}
			if c.status == 401 && resp.Header.Get("WWW-Authenticate") != `Basic realm="gnt maintd", charset="UTF-8"` {
				t.Errorf("GET %s as %q: 401 without a basic-auth challenge: %q", p, c.user, resp.Header.Get("WWW-Authenticate"))
			}
			if resp.Header.Get(HeaderEpoch) != "7" {
				t.Errorf("GET %s as %q: no epoch header", p, c.user)
			}
		}
		if write, ok := u.seen["GET "+p]; !ok || write {
			t.Errorf("GET %s: the hook saw write=%v (called: %v)", p, write, ok)
		}
	}
	// The web page: a browser without credentials is challenged, and
	// gets the page once it sends them.
	resp, body := do("GET", "/", "", "", "text/html", "")
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") || strings.Contains(body, "inc-1") {
		t.Errorf("page without credentials: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	if resp, body := do("GET", "/", "reader", "r", "text/html", ""); resp.StatusCode != 200 || !strings.Contains(body, "inc-1") {
		t.Errorf("page as reader: %d %s", resp.StatusCode, body)
	}
	// Writes: refused for anonymous and readers (nothing changes), and
	// any method but GET is a write, even on a path without a route.
	for _, c := range []struct {
		method, path, user, pw string
		status                 int
		want                   string
	}{
		{"POST", "/1/cancel/inc-1", "", "", 401, "authentication required"},
		{"POST", "/1/cancel/inc-1", "reader", "r", 403, "reader may not write"},
		{"POST", "/1/cancel/inc-1", "silent", "", 403, "forbidden"},
		{"DELETE", "/1/status", "reader", "r", 403, "reader may not write"},
		{"POST", "/1/status", "", "", 401, "authentication required"},
	} {
		resp, body := do(c.method, c.path, c.user, c.pw, "", "")
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s %s as %q: %d %s, want %d %q", c.method, c.path, c.user, resp.StatusCode, body, c.status, c.want)
		}
		if write := u.seen[c.method+" "+c.path]; !write {
			t.Errorf("%s %s: the hook saw a read", c.method, c.path)
		}
	}
	// A write from another site's page, with the writer's credentials
	// (a browser sends cached ones along), is refused too.
	if resp, body := do("POST", "/1/cancel/inc-1", "writer", "w", "", "http://evil.example"); resp.StatusCode != 403 || !strings.Contains(body, "another origin") {
		t.Errorf("cross-origin cancel: %d %s", resp.StatusCode, body)
	}
	if sc.f.Hash() != before {
		t.Fatal("refused requests changed the state")
	}
	// The writer, from maintd's own page or from a client without Origin.
	if resp, body := do("POST", "/1/cancel/inc-1", "writer", "w", "", srv.URL); resp.StatusCode != 200 {
		t.Fatalf("cancel as writer: %d %s", resp.StatusCode, body)
	}
	if resp, body := do("POST", "/1/cancel/inc-2", "writer", "w", "", ""); resp.StatusCode != 409 {
		t.Errorf("cancel of a completed incident as writer: %d %s", resp.StatusCode, body)
	}
	// A hook's own challenge is kept.
	u.challenge = `Basic realm="Ganeti Remote API"`
	if resp, _ := do("GET", "/1/status", "", "", "", ""); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != u.challenge {
		t.Errorf("the hook's challenge: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}
