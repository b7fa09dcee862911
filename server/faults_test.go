package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/transport"
)

func TestFaultsHandlerBadInput(t *testing.T) {
	for _, c := range []struct {
		method, body string
		code         int
	}{
		{"GET", "", http.StatusMethodNotAllowed},
		{"POST", "", http.StatusBadRequest},
		{"POST", "{", http.StatusBadRequest},
		{"POST", `{"blok":["127.0.0.1"]}`, http.StatusBadRequest},
		{"POST", `{"block":"127.0.0.1"}`, http.StatusBadRequest},
		{"POST", `{"delay":"soon"}`, http.StatusBadRequest},
		{"POST", `{"delay":"-1s"}`, http.StatusBadRequest},
		{"POST", `{"drop_rate":1.5}`, http.StatusBadRequest},
		{"POST", `{"drop_rate":-0.1}`, http.StatusBadRequest},
		{"POST", `{"block":["` + strings.Repeat("x", 1<<17) + `"]}`, http.StatusBadRequest},
		{"POST", `{"block":["127.0.0.12:1817"],"delay":"1ms","drop_rate":0}`, http.StatusOK},
		{"POST", `{"heal":true}`, http.StatusOK},
		{"POST", `{"cut_to":["127.0.0.12"]}`, http.StatusOK},
		{"POST", `{"cut_to":"127.0.0.12"}`, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		faultsHandler(&transport.Faults{}).ServeHTTP(rec, httptest.NewRequest(c.method, "/debug/faults", strings.NewReader(c.body)))
		if rec.Code != c.code {
			t.Errorf("%s %.40q: %d, want %d (%s)", c.method, c.body, rec.Code, c.code, rec.Body)
		}
	}
}

func FuzzFaultsHandler(f *testing.F) {
	f.Add(`{"block":["127.0.0.12:1817"],"unblock":["x"],"block_all":true,"heal":true,"delay":"5ms","drop_rate":0.5}`)
	f.Add(`{"cut_to":["127.0.0.12:1817"]}`)
	f.Add(`{"drop_rate":2}`)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		faultsHandler(&transport.Faults{}).ServeHTTP(rec, httptest.NewRequest("POST", "/debug/faults", strings.NewReader(body)))
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("%q: %d", body, rec.Code)
		}
	})
}

func TestBuildVersion(t *testing.T) {
	for v, want := range map[string]int{"0.1.0": 10000, "2.16.2": 2160002, "3.0": 3000000, "1.2.3-rc1": 1020003} {
		if got := buildVersion(v); got != want {
			t.Errorf("%s: %d, want %d", v, got, want)
		}
	}
}
