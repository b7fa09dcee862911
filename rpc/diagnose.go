package rpc

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gnt-cluster/gnt/fsm"
)

// The self-diagnose report: the node agent's self-diagnose result in the
// format of a Ganeti monitoring daemon (mond) data collector report,
//
//	{"name":"diagnose","version":"B","format_version":1,
//	 "timestamp":<unix ns>,"category":"node","kind":1,"data":<result>}
//
// (kind 1 is Ganeti's DCKStatus, a status-reporting collector), signed by
// its node so that the maintenance daemon acts only on what a node of the
// cluster reported (Ganeti's design: "the monitoring daemon will sign the
// result by an hmac signature with the cluster hmac key").
//
// The signature is the lowercase hex HMAC-SHA256, with the key
// DeriveKey(clusterKey, DiagnoseKeyLabel), of
//
//	node + "\n" + timestamp + "\n" + report
//
// where node is the reporting node's name, timestamp the report's
// timestamp in decimal unix nanoseconds, and report the report's exact
// bytes. A verifier checks the signature before it reads the report, then
// that the node is the one it asked and that the timestamp is recent
// (DiagnoseVerify).
//
// The report travels either as a SignedDiagnoseReport (JSON, the node RPC
// operation diagnose answers one) or as an HTTP answer whose body is the
// report alone, as mond serves it, with the node, timestamp and
// signature in the X-Gnt-Report-* headers (GET DiagnoseReportPath on the
// agent port).

// DiagnoseKeyLabel is the label the diagnose report key is derived with
// from the cluster key.
const DiagnoseKeyLabel = "gnt diagnose report v1"

// DiagnoseReportPath is where an agent serves its last report, mond's
// /1/report/<category>/<collector>.
const DiagnoseReportPath = "/1/report/node/diagnose"

// Headers of a report served over HTTP.
const (
	HeaderReportNode      = "X-Gnt-Report-Node"
	HeaderReportTimestamp = "X-Gnt-Report-Timestamp"
	HeaderReportSignature = "X-Gnt-Report-Signature"
)

// The self-diagnose collector's report fields (Ganeti's
// DataCollectors/Diagnose.hs and DataCollectors/Types.hs).
const (
	DiagnoseCollectorName    = "diagnose"
	DiagnoseCollectorVersion = "B" // builtinDataCollectorVersion
	DiagnoseFormatVersion    = 1
	DiagnoseCategory         = "node"
	DiagnoseKind             = 1 // DCKStatus
)

// DefaultReportMaxAge is how old a report DiagnoseVerify accepts unless
// told otherwise.
const DefaultReportMaxAge = 2 * time.Minute

// Errors of VerifyDiagnoseReport: the returned error wraps exactly one.
var (
	ErrReportUnsigned  = errors.New("diagnose report is not signed")
	ErrReportForged    = errors.New("diagnose report signature does not verify")
	ErrReportWrongNode = errors.New("diagnose report is from another node")
	ErrReportStale     = errors.New("diagnose report is too old")
	ErrReportFuture    = errors.New("diagnose report is from the future")
	ErrReportMalformed = errors.New("diagnose report is malformed")
)

// reportReasons are the names of the errors of VerifyDiagnoseReport.
var reportReasons = []struct {
	err  error
	name string
}{
	{ErrReportUnsigned, "unsigned"}, {ErrReportForged, "forged"}, {ErrReportWrongNode, "wrong_node"},
	{ErrReportStale, "stale"}, {ErrReportFuture, "future"}, {ErrReportMalformed, "malformed"},
}

// ReportRejectReason names the reason an error of VerifyDiagnoseReport
// (or of DiagnoseReportFromHTTP) gives: unsigned, forged, wrong_node,
// stale, future or malformed; "other" for any other error.
func ReportRejectReason(err error) string {
	for _, r := range reportReasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}

// ReportRejectReasons lists the names ReportRejectReason gives.
func ReportRejectReasons() []string {
	out := make([]string, 0, len(reportReasons)+1)
	for _, r := range reportReasons {
		out = append(out, r.name)
	}
	return append(out, "other")
}

// DiagnoseKey derives the diagnose report key from the cluster key.
func DiagnoseKey(clusterKey []byte) []byte { return DeriveKey(clusterKey, DiagnoseKeyLabel) }

// DiagnoseReport is a self-diagnose collector report.
type DiagnoseReport struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	FormatVersion int    `json:"format_version"`
	// Timestamp is when the result was collected, in unix nanoseconds.
	Timestamp int64  `json:"timestamp"`
	Category  string `json:"category"`
	Kind      int    `json:"kind"`
	// Data is the self-diagnose result, a JSON object.
	Data json.RawMessage `json:"data"`
}

// SignedDiagnoseReport is a report with what its signature covers.
type SignedDiagnoseReport struct {
	// Node is the reporting node's name.
	Node string `json:"node"`
	// Timestamp is the report's timestamp (unix ns).
	Timestamp int64 `json:"timestamp"`
	// Report is the report's exact bytes.
	Report json.RawMessage `json:"report"`
	// Signature is the hex HMAC-SHA256; empty when unsigned.
	Signature string `json:"signature"`
}

func reportMAC(key []byte, node string, ts int64, report []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(node))
	m.Write([]byte{'\n'})
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte{'\n'})
	m.Write(report)
	return m.Sum(nil)
}

// NewDiagnoseReport builds the unsigned report of a self-diagnose result
// (a JSON object) that node collected at at.
func NewDiagnoseReport(node string, at time.Time, data json.RawMessage) (SignedDiagnoseReport, error) {
	if e := fsm.ValidateHostname("node", node); e != nil {
		return SignedDiagnoseReport{}, fmt.Errorf("diagnose report: %s", e.Msg)
	}
	if !isJSONObject(data) {
		return SignedDiagnoseReport{}, errors.New("diagnose report: the data is not a JSON object")
	}
	ts := at.UnixNano()
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // the data as collected, byte for byte once compact
	if err := enc.Encode(DiagnoseReport{
		Name: DiagnoseCollectorName, Version: DiagnoseCollectorVersion, FormatVersion: DiagnoseFormatVersion,
		Timestamp: ts, Category: DiagnoseCategory, Kind: DiagnoseKind, Data: data,
	}); err != nil {
		return SignedDiagnoseReport{}, fmt.Errorf("diagnose report: %w", err)
	}
	return SignedDiagnoseReport{Node: node, Timestamp: ts, Report: bytes.TrimSuffix(body.Bytes(), []byte{'\n'})}, nil
}

// Sign returns the report signed with key (DiagnoseKey); with no key, the
// report unsigned.
func (r SignedDiagnoseReport) Sign(key []byte) SignedDiagnoseReport {
	r.Signature = ""
	if len(key) > 0 {
		r.Signature = hex.EncodeToString(reportMAC(key, r.Node, r.Timestamp, r.Report))
	}
	return r
}

// SetHeader sets the headers that carry the report's node, timestamp and
// signature (the latter only when signed).
func (r SignedDiagnoseReport) SetHeader(h http.Header) {
	h.Set(HeaderReportNode, r.Node)
	h.Set(HeaderReportTimestamp, strconv.FormatInt(r.Timestamp, 10))
	if r.Signature != "" {
		h.Set(HeaderReportSignature, r.Signature)
	}
}

// DiagnoseReportFromHTTP reads a report served over HTTP: the body is the
// report, the headers carry the rest. It fails with ErrReportUnsigned
// when there is no signature and ErrReportMalformed when the timestamp
// header is not a decimal integer; VerifyDiagnoseReport checks the rest.
func DiagnoseReportFromHTTP(h http.Header, body []byte) (SignedDiagnoseReport, error) {
	r := SignedDiagnoseReport{Node: h.Get(HeaderReportNode), Report: body, Signature: h.Get(HeaderReportSignature)}
	if r.Signature == "" {
		return r, fmt.Errorf("%w: no %s header", ErrReportUnsigned, HeaderReportSignature)
	}
	raw := h.Get(HeaderReportTimestamp)
	ts, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || strconv.FormatInt(ts, 10) != raw {
		return r, fmt.Errorf("%w: %s %q is not a decimal integer", ErrReportMalformed, HeaderReportTimestamp, raw)
	}
	r.Timestamp = ts
	return r, nil
}

// DiagnoseVerify is what VerifyDiagnoseReport checks a report against.
type DiagnoseVerify struct {
	// Key is the diagnose report key (DiagnoseKey).
	Key []byte
	// Node is the node that was asked: a report of any other is refused.
	Node string
	// Now is the verifier's clock; a report older than MaxAge (default
	// DefaultReportMaxAge) is stale, one more than MaxSkew (default
	// MaxClockSkew) ahead of Now is from the future.
	Now     time.Time
	MaxAge  time.Duration
	MaxSkew time.Duration
}

// VerifyDiagnoseReport checks a signed report, in this order: it is
// signed (ErrReportUnsigned), the signature verifies (ErrReportForged), it
// is from the node asked (ErrReportWrongNode), it is a self-diagnose
// report of that timestamp whose data is a JSON object
// (ErrReportMalformed: strict, no unknown fields), and its timestamp is
// recent (ErrReportStale, ErrReportFuture). It returns the decoded
// report.
func VerifyDiagnoseReport(r SignedDiagnoseReport, o DiagnoseVerify) (DiagnoseReport, error) {
	var rep DiagnoseReport
	if r.Signature == "" {
		return rep, ErrReportUnsigned
	}
	if len(o.Key) == 0 {
		return rep, fmt.Errorf("%w: no key to verify with", ErrReportForged)
	}
	sig, err := hex.DecodeString(r.Signature)
	if err != nil || len(sig) != sha256.Size {
		return rep, fmt.Errorf("%w: not a hex HMAC-SHA256", ErrReportForged)
	}
	if !hmac.Equal(sig, reportMAC(o.Key, r.Node, r.Timestamp, r.Report)) {
		return rep, fmt.Errorf("%w: signature does not match", ErrReportForged)
	}
	if r.Node != o.Node {
		return rep, fmt.Errorf("%w: asked %s, signed by %s", ErrReportWrongNode, o.Node, r.Node)
	}
	if err := fsm.DecodeStrict(r.Report, &rep); err != nil {
		return DiagnoseReport{}, fmt.Errorf("%w: %v", ErrReportMalformed, err)
	}
	switch {
	case rep.Name != DiagnoseCollectorName || rep.Category != DiagnoseCategory || rep.Kind != DiagnoseKind:
		return DiagnoseReport{}, fmt.Errorf("%w: a report of collector %q, category %q, kind %d; want %s, %s, %d",
			ErrReportMalformed, rep.Name, rep.Category, rep.Kind, DiagnoseCollectorName, DiagnoseCategory, DiagnoseKind)
	case rep.FormatVersion != DiagnoseFormatVersion:
		return DiagnoseReport{}, fmt.Errorf("%w: format version %d; want %d", ErrReportMalformed, rep.FormatVersion, DiagnoseFormatVersion)
	case rep.Timestamp != r.Timestamp:
		return DiagnoseReport{}, fmt.Errorf("%w: the report's timestamp %d is not the signed one %d", ErrReportMalformed, rep.Timestamp, r.Timestamp)
	case !isJSONObject(rep.Data):
		return DiagnoseReport{}, fmt.Errorf("%w: the data is not a JSON object", ErrReportMalformed)
	}
	maxAge, maxSkew := o.MaxAge, o.MaxSkew
	if maxAge <= 0 {
		maxAge = DefaultReportMaxAge
	}
	if maxSkew <= 0 {
		maxSkew = MaxClockSkew
	}
	at := time.Unix(0, r.Timestamp)
	if age := o.Now.Sub(at); age > maxAge {
		return DiagnoseReport{}, fmt.Errorf("%w: collected %s ago, more than %s", ErrReportStale, age.Round(time.Millisecond), maxAge)
	} else if -age > maxSkew {
		return DiagnoseReport{}, fmt.Errorf("%w: collected %s after this server's clock, more than %s", ErrReportFuture, (-age).Round(time.Millisecond), maxSkew)
	}
	return rep, nil
}

// isJSONObject reports whether b is one valid JSON object in UTF-8
// (json.Valid alone lets invalid UTF-8 inside strings through, which the
// strict decoder of a received report refuses).
func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && utf8.Valid(b) && json.Valid(b)
}

// DiagnoseReportHandler serves GET DiagnoseReportPath: the report that
// report returns, as its body, with its X-Gnt-Report-* headers. Anyone may
// ask: it runs nothing (report returns what was last collected), and what
// it answers is signed.
func DiagnoseReportHandler(report func() (SignedDiagnoseReport, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != DiagnoseReportPath {
			writeNodeError(w, &NodeError{Status: http.StatusNotFound, ErrorCode: CodeNotFound, Message: "no such report; try GET " + DiagnoseReportPath})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeNodeError(w, &NodeError{Status: http.StatusMethodNotAllowed, ErrorCode: CodeMethod, Message: "GET the report"})
			return
		}
		rep, err := report()
		if err != nil {
			writeNodeError(w, NewNodeError(NodeCodeFailed, "no report: %v", err))
			return
		}
		// The body is the signed bytes exactly (writeRaw would add a newline).
		rep.SetHeader(w.Header())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(rep.Report)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(rep.Report)
		}
	})
}
