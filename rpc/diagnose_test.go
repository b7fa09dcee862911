package rpc_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/rpc"
)

var (
	clusterKey = []byte("0123456789abcdef0123456789abcdef01234567\n")
	reportKey  = rpc.DiagnoseKey(clusterKey)
	reportAt   = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
)

func signedReport(t *testing.T, node, data string, at time.Time) rpc.SignedDiagnoseReport {
	t.Helper()
	r, err := rpc.NewDiagnoseReport(node, at, json.RawMessage(data))
	if err != nil {
		t.Fatal(err)
	}
	return r.Sign(reportKey)
}

func verifyAt(r rpc.SignedDiagnoseReport, node string, now time.Time) (rpc.DiagnoseReport, error) {
	return rpc.VerifyDiagnoseReport(r, rpc.DiagnoseVerify{Key: reportKey, Node: node, Now: now, MaxAge: time.Minute, MaxSkew: 10 * time.Second})
}

// TestDiagnoseReportFormat: the report is mond's, fields in Ganeti's
// order, the data as given (compact, not HTML-escaped), and it verifies.
func TestDiagnoseReportFormat(t *testing.T) {
	r := signedReport(t, "node21", `{"details": {"x":"<&>"}, "status":"evacuate"}`, reportAt)
	want := `{"name":"diagnose","version":"B","format_version":1,"timestamp":1714979289123456789,"category":"node","kind":1,` +
		`"data":{"details":{"x":"<&>"},"status":"evacuate"}}`
	if string(r.Report) != want || r.Node != "node21" || r.Timestamp != reportAt.UnixNano() || len(r.Signature) != 64 {
		t.Fatalf("report %+v\nwant %s", r, want)
	}
	rep, err := verifyAt(r, "node21", reportAt.Add(30*time.Second))
	if err != nil || string(rep.Data) != `{"details":{"x":"<&>"},"status":"evacuate"}` || rep.Timestamp != r.Timestamp {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	if bytes.Equal(rpc.DiagnoseKey(clusterKey), rpc.NodeKey(clusterKey)) {
		t.Error("the report key is the node RPC key")
	}
	for _, bad := range []string{`[]`, `"Ok"`, `null`, ``, `{`, `{"a":1}x`} {
		if _, err := rpc.NewDiagnoseReport("node21", reportAt, json.RawMessage(bad)); err == nil {
			t.Errorf("data %q accepted", bad)
		}
	}
	if _, err := rpc.NewDiagnoseReport("bad node", reportAt, json.RawMessage(`{}`)); err == nil {
		t.Error("a bad node name accepted")
	}
}

// TestDiagnoseReportRejections: each way a report is refused gives its
// own sentinel, so that the caller can count them.
func TestDiagnoseReportRejections(t *testing.T) {
	now := reportAt.Add(5 * time.Second)
	good := func() rpc.SignedDiagnoseReport { return signedReport(t, "node21", `{"status":"evacuate"}`, reportAt) }
	resign := func(r rpc.SignedDiagnoseReport) rpc.SignedDiagnoseReport { return r.Sign(reportKey) }
	for _, tc := range []struct {
		name   string
		report func() rpc.SignedDiagnoseReport
		ask    string
		now    time.Time
		want   error
		reason string
	}{
		{"unsigned", func() rpc.SignedDiagnoseReport { r := good(); r.Signature = ""; return r }, "node21", now, rpc.ErrReportUnsigned, "unsigned"},
		{"signature not hex", func() rpc.SignedDiagnoseReport { r := good(); r.Signature = "zz"; return r }, "node21", now, rpc.ErrReportForged, "forged"},
		{"signature truncated", func() rpc.SignedDiagnoseReport { r := good(); r.Signature = r.Signature[:62]; return r }, "node21", now, rpc.ErrReportForged, "forged"},
		{"other key", func() rpc.SignedDiagnoseReport { return good().Sign(rpc.DiagnoseKey([]byte("another cluster"))) }, "node21", now, rpc.ErrReportForged, "forged"},
		{"node RPC key", func() rpc.SignedDiagnoseReport { return good().Sign(rpc.NodeKey(clusterKey)) }, "node21", now, rpc.ErrReportForged, "forged"},
		{"data changed", func() rpc.SignedDiagnoseReport {
			r := good()
			r.Report = bytes.Replace(r.Report, []byte("evacuate"), []byte("Ok"), 1)
			return r
		}, "node21", now, rpc.ErrReportForged, "forged"},
		{"node changed", func() rpc.SignedDiagnoseReport { r := good(); r.Node = "node22"; return r }, "node22", now, rpc.ErrReportForged, "forged"},
		{"timestamp changed", func() rpc.SignedDiagnoseReport { r := good(); r.Timestamp += int64(time.Second); return r }, "node21", now, rpc.ErrReportForged, "forged"},
		{"another node's report", good, "node22", now, rpc.ErrReportWrongNode, "wrong_node"},
		{"stale", good, "node21", reportAt.Add(time.Minute + time.Millisecond), rpc.ErrReportStale, "stale"},
		{"future", good, "node21", reportAt.Add(-11 * time.Second), rpc.ErrReportFuture, "future"},
		{"signed garbage", func() rpc.SignedDiagnoseReport { r := good(); r.Report = []byte("garbage"); return resign(r) }, "node21", now, rpc.ErrReportMalformed, "malformed"},
		{"unknown field", func() rpc.SignedDiagnoseReport {
			r := good()
			r.Report = bytes.Replace(r.Report, []byte(`"kind":1`), []byte(`"kind":1,"extra":0`), 1)
			return resign(r)
		}, "node21", now, rpc.ErrReportMalformed, "malformed"},
		{"another collector", func() rpc.SignedDiagnoseReport {
			r := good()
			r.Report = bytes.Replace(r.Report, []byte(`"diagnose"`), []byte(`"drbd"`), 1)
			return resign(r)
		}, "node21", now, rpc.ErrReportMalformed, "malformed"},
		{"kind perf", func() rpc.SignedDiagnoseReport {
			r := good()
			r.Report = bytes.Replace(r.Report, []byte(`"kind":1`), []byte(`"kind":0`), 1)
			return resign(r)
		}, "node21", now, rpc.ErrReportMalformed, "malformed"},
		{"format version", func() rpc.SignedDiagnoseReport {
			r := good()
			r.Report = bytes.Replace(r.Report, []byte(`"format_version":1`), []byte(`"format_version":2`), 1)
			return resign(r)
		}, "node21", now, rpc.ErrReportMalformed, "malformed"},
		{"timestamps differ", func() rpc.SignedDiagnoseReport { r := good(); r.Timestamp++; return resign(r) }, "node21", now, rpc.ErrReportMalformed, "malformed"},
		{"data not an object", func() rpc.SignedDiagnoseReport {
			r := good()
			r.Report = bytes.Replace(r.Report, []byte(`{"status":"evacuate"}`), []byte(`["evacuate"]`), 1)
			return resign(r)
		}, "node21", now, rpc.ErrReportMalformed, "malformed"},
		{"no data", func() rpc.SignedDiagnoseReport {
			r := good()
			r.Report = bytes.Replace(r.Report, []byte(`,"data":{"status":"evacuate"}`), nil, 1)
			return resign(r)
		}, "node21", now, rpc.ErrReportMalformed, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := verifyAt(tc.report(), tc.ask, tc.now)
			if !errors.Is(err, tc.want) || rpc.ReportRejectReason(err) != tc.reason {
				t.Fatalf("verify: %+v %v; want %v (%s)", rep, err, tc.want, tc.reason)
			}
			for _, other := range []error{rpc.ErrReportUnsigned, rpc.ErrReportForged, rpc.ErrReportWrongNode, rpc.ErrReportStale, rpc.ErrReportFuture, rpc.ErrReportMalformed} {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("%v also matches %v", err, other)
				}
			}
		})
	}
	if _, err := rpc.VerifyDiagnoseReport(good(), rpc.DiagnoseVerify{Node: "node21", Now: now}); !errors.Is(err, rpc.ErrReportForged) {
		t.Errorf("no key: %v", err)
	}
	// Defaults: two minutes of age, MaxClockSkew ahead.
	def := rpc.DiagnoseVerify{Key: reportKey, Node: "node21"}
	for _, tc := range []struct {
		now  time.Time
		want error
	}{
		{reportAt.Add(rpc.DefaultReportMaxAge), nil}, {reportAt.Add(rpc.DefaultReportMaxAge + 1), rpc.ErrReportStale},
		{reportAt.Add(-rpc.MaxClockSkew), nil}, {reportAt.Add(-rpc.MaxClockSkew - 1), rpc.ErrReportFuture},
	} {
		def.Now = tc.now
		if _, err := rpc.VerifyDiagnoseReport(good(), def); !errors.Is(err, tc.want) {
			t.Errorf("at %v: %v, want %v", tc.now.Sub(reportAt), err, tc.want)
		}
	}
	if rpc.ReportRejectReason(errors.New("x")) != "other" || len(rpc.ReportRejectReasons()) != 7 {
		t.Error("reasons")
	}
}

// TestDiagnoseReportHandler: GET serves the report's exact bytes with
// its headers, which verify; other methods and paths are refused.
func TestDiagnoseReportHandler(t *testing.T) {
	cur := signedReport(t, "node21", `{"status":"live-repair","command":"fix"}`, reportAt)
	var fail error
	srv := httptest.NewServer(rpc.DiagnoseReportHandler(func() (rpc.SignedDiagnoseReport, error) { return cur, fail }))
	defer srv.Close()
	get := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	resp, body := get(http.MethodGet, rpc.DiagnoseReportPath)
	if resp.StatusCode != 200 || !bytes.Equal(body, cur.Report) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET: %d %s", resp.StatusCode, body)
	}
	got, err := rpc.DiagnoseReportFromHTTP(resp.Header, body)
	if err != nil || got.Node != "node21" || got.Timestamp != cur.Timestamp || got.Signature != cur.Signature {
		t.Fatalf("from HTTP: %+v %v", got, err)
	}
	if _, err := verifyAt(got, "node21", reportAt); err != nil {
		t.Fatalf("served report does not verify: %v", err)
	}
	if resp, body := get(http.MethodHead, rpc.DiagnoseReportPath); resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get(rpc.HeaderReportSignature) == "" {
		t.Errorf("HEAD: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(http.MethodPost, rpc.DiagnoseReportPath); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	if resp, _ := get(http.MethodGet, "/1/report/node/drbd"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another collector: %d", resp.StatusCode)
	}
	fail = errors.New("broken")
	if resp, _ := get(http.MethodGet, rpc.DiagnoseReportPath); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("failing report: %d", resp.StatusCode)
	}

	// Unsigned (a node without the cluster key yet), and a bad timestamp.
	fail, cur = nil, cur.Sign(nil)
	resp, body = get(http.MethodGet, rpc.DiagnoseReportPath)
	if _, err := rpc.DiagnoseReportFromHTTP(resp.Header, body); !errors.Is(err, rpc.ErrReportUnsigned) {
		t.Errorf("unsigned over HTTP: %v", err)
	}
	for _, ts := range []string{"", "x", "+1", "01", "1.5", "99999999999999999999"} {
		h := http.Header{}
		h.Set(rpc.HeaderReportSignature, "00")
		h.Set(rpc.HeaderReportTimestamp, ts)
		if _, err := rpc.DiagnoseReportFromHTTP(h, nil); !errors.Is(err, rpc.ErrReportMalformed) {
			t.Errorf("timestamp %q: %v", ts, err)
		}
	}
}

// FuzzVerifyDiagnoseReport: verification never panics and every refusal
// is one of the sentinels. When the fuzzer's report is signed with the
// right key (so that the checks past the signature are reached), what is
// accepted is a self-diagnose report of the asked node, of the signed
// timestamp, with a JSON object as data, recent; and any change to a
// byte of it is refused as forged. Reports built by NewDiagnoseReport
// from any data it takes verify. Run with go test -fuzz
// FuzzVerifyDiagnoseReport ./rpc; the corpus is in testdata/fuzz.
func FuzzVerifyDiagnoseReport(f *testing.F) {
	good, _ := rpc.NewDiagnoseReport("node21", reportAt, json.RawMessage(`{"status":"evacuate","details":{"disk":"sdb"}}`))
	f.Add("node21", good.Timestamp, []byte(good.Report), "", true, "")
	f.Add("node21", good.Timestamp, []byte(good.Report), good.Sign(reportKey).Signature, false, `{"status":"Ok"}`)
	f.Add("node22", good.Timestamp, []byte(good.Report), "", true, `[]`)
	f.Add("node21", good.Timestamp+1, []byte(good.Report), "", true, `{"a":"<>"}`)
	f.Add("node21", int64(0), []byte(`{"name":"diagnose"}`), "", true, `{}`)
	f.Add("node21", good.Timestamp, []byte(`garbage`), "00", false, ``)
	f.Add("", int64(-1), []byte(nil), "", false, `null`)
	now := reportAt.Add(time.Second)
	o := rpc.DiagnoseVerify{Key: reportKey, Node: "node21", Now: now, MaxAge: time.Minute, MaxSkew: time.Minute}
	f.Fuzz(func(t *testing.T, node string, ts int64, report []byte, sig string, sign bool, data string) {
		r := rpc.SignedDiagnoseReport{Node: node, Timestamp: ts, Report: report, Signature: sig}
		if sign {
			r = r.Sign(reportKey)
		}
		rep, err := rpc.VerifyDiagnoseReport(r, o)
		if err != nil {
			if rpc.ReportRejectReason(err) == "other" {
				t.Fatalf("refusal is no sentinel: %v", err)
			}
			if r.Signature != "" && !bytes.Equal(mustHex(r.Signature), mustHex(r.Sign(reportKey).Signature)) && !errors.Is(err, rpc.ErrReportForged) {
				t.Fatalf("a wrong signature was not refused as forged: %v", err)
			}
		} else {
			if node != "node21" || rep.Timestamp != ts || rep.Name != rpc.DiagnoseCollectorName || rep.Kind != rpc.DiagnoseKind ||
				!json.Valid(rep.Data) || bytes.TrimSpace(rep.Data)[0] != '{' {
				t.Fatalf("accepted %+v", rep)
			}
			if age := now.Sub(time.Unix(0, ts)); age > time.Minute || age < -time.Minute {
				t.Fatalf("accepted a report %v old", age)
			}
			for i := range report {
				r2 := r
				r2.Report = append([]byte(nil), report...)
				r2.Report[i] ^= 0x20
				if _, err := rpc.VerifyDiagnoseReport(r2, o); !errors.Is(err, rpc.ErrReportForged) {
					t.Fatalf("byte %d changed, not refused as forged: %v", i, err)
				}
			}
		}
		// Over HTTP (headers are outside input too) the same report gets
		// the same verdict.
		h := http.Header{}
		h.Set(rpc.HeaderReportNode, node)
		h.Set(rpc.HeaderReportTimestamp, strconv.FormatInt(ts, 10))
		h.Set(rpc.HeaderReportSignature, r.Signature)
		got, herr := rpc.DiagnoseReportFromHTTP(h, report)
		switch {
		case r.Signature == "":
			if !errors.Is(herr, rpc.ErrReportUnsigned) {
				t.Fatalf("unsigned over HTTP: %v", herr)
			}
		case herr != nil:
			t.Fatalf("headers of a signed report refused: %v", herr)
		default:
			_, err2 := rpc.VerifyDiagnoseReport(got, o)
			if (err2 == nil) != (err == nil) || rpc.ReportRejectReason(err2) != rpc.ReportRejectReason(err) {
				t.Fatalf("over HTTP %v, directly %v", err2, err)
			}
		}
		// Built reports verify.
		if b, err := rpc.NewDiagnoseReport("node21", reportAt, json.RawMessage(data)); err == nil {
			if rep, err := rpc.VerifyDiagnoseReport(b.Sign(reportKey), o); err != nil {
				t.Fatalf("a built report of %q does not verify: %v", data, err)
			} else if !json.Valid(rep.Data) {
				t.Fatalf("built data %q", rep.Data)
			}
		}
	})
}

func mustHex(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}
