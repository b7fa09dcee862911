package repair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// Handler is maintd's HTTP API (Ganeti's, plus gnt's extensions):
//
//	GET  /             [1] (a web status page for browsers)
//	GET  /1            null
//	GET  /1/status     the incidents, then harep's failed repairs (gnt)
//	GET  /1/jobs       the jobs maintd waits for
//	GET  /1/jobs/ID    one job, as the state has it (gnt; the page links it)
//	GET  /1/evacuated  instances moved by maintd
//	POST /1/cancel/ID  cancel an incident (gnt)
//	GET  /1/plan       what the next round would do and why (gnt)
//
// Every request first goes through the Authorize hook, if any, with the
// access AccessOf gives it (POST /1/cancel/ID writes, GETs read); a write
// whose Origin is another site's is then refused with 403.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.handleRoot)
	mux.HandleFunc("GET /1", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, nil) })
	mux.HandleFunc("GET /1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.status(r.Context()))
	})
	mux.HandleFunc("GET /1/jobs/{id}", s.handleJob)
	mux.HandleFunc("GET /1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.maint().Jobs)
	})
	mux.HandleFunc("GET /1/evacuated", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.maint().Evacuated)
	})
	mux.HandleFunc("POST /1/cancel/{id}", s.handleCancel)
	mux.HandleFunc("GET /1/plan", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Plan(r.Context()))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found: " + r.Method + " " + r.URL.Path})
	})
	epoch := strconv.FormatUint(s.Epoch, 10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Which leadership answered: chaos tests check that two never
		// answer at once.
		w.Header().Set(HeaderEpoch, epoch)
		a := AccessOf(r)
		if !s.authorize(w, r, a) {
			return
		}
		if a == AccessWrite && crossOrigin(r) {
			writeJSON(w, http.StatusForbidden, map[string]string{
				"error": "a write from another origin (" + r.Header.Get("Origin") + ") is refused", "code": "forbidden"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// HeaderEpoch carries, on every maintd answer, the executor epoch of the
// leadership whose maintd answered.
const HeaderEpoch = "X-Gnt-Maintd-Epoch"

// IncidentStatus is an incident as /1/status reports it: Ganeti's fields
// and gnt's, plus the operator's next step (gnt_next_step).
type IncidentStatus struct {
	*fsm.Incident
	NextStep string `json:"gnt_next_step,omitempty"`
}

// Incidents are the incidents of the maintenance state with their next
// steps.
func Incidents(m *fsm.Maintenance) []IncidentStatus {
	out := make([]IncidentStatus, len(m.Incidents))
	for i, in := range m.Incidents {
		out[i] = IncidentStatus{Incident: in, NextStep: NextStep(in)}
	}
	return out
}

// HarepFailure is a failed harep repair as /1/status lists it, after the
// incidents (a gnt extension): gnt's maintd does harep's work, so what it
// could not repair is reported where its other failures are, in the
// incidents' shape so that a client reading Ganeti's fields reads it too:
// uuid is the repair's id, node the instance's primary node, original
// names the instance and the repair, action is "harep:" and the repair
// type, repair-status "failed", jobs the repair's jobs and tag the
// failure tag harep leaves the instance alone for, gnt_reason harep's
// words. gnt_kind ("harep") tells it from an incident; gnt_error is the
// failed job's error and gnt_next_step the operator's next step.
type HarepFailure struct {
	fsm.Incident
	Kind     string `json:"gnt_kind"`
	Instance string `json:"gnt_instance"`
	Error    string `json:"gnt_error,omitempty"`
	NextStep string `json:"gnt_next_step"`
}

// HarepFailures are the failed repairs among harep's instance statuses,
// in their order, as /1/status lists them.
func HarepFailures(st *fsm.State, insts []InstanceStatus) []HarepFailure {
	var out []HarepFailure
	for _, is := range insts {
		if is.State != StateFailed {
			continue
		}
		typ := ""
		if t, ok, err := ParseTag(is.FailureTag); ok && err == nil {
			typ = t.Type
		}
		f := HarepFailure{Incident: fsm.Incident{UUID: is.Repair, Action: "harep:" + typ, RepairStatus: fsm.IncidentFailed, Jobs: is.Jobs,
			Tag: is.FailureTag, Reason: is.Why}, Kind: "harep", Instance: is.Name, Error: is.Error, NextStep: is.NextStep}
		if f.Jobs == nil {
			f.Jobs = []int64{}
		}
		f.Original, _ = json.Marshal(map[string]string{"instance": is.Name, "repair": typ})
		if in := st.LookupInstance(is.Name); in != nil {
			f.Incident.NodeUUID = in.PrimaryNode
			if n := st.Nodes[in.PrimaryNode]; n != nil {
				f.Node = n.Name
			}
		}
		out = append(out, f)
	}
	return out
}

// status is /1/status: the incidents, then harep's failed repairs.
func (s *Service) status(ctx context.Context) []any {
	p := s.Plan(ctx)
	var out []any
	s.FSM.Read(func(st *fsm.State, _ uint64) {
		for _, in := range Incidents(st.Maint()) {
			out = append(out, in)
		}
		for _, f := range HarepFailures(st, p.Instances) {
			out = append(out, f)
		}
	})
	if out == nil {
		out = []any{}
	}
	return out
}

// NextStep says what an operator does about an incident in its state;
// "" when nothing is asked of them.
func NextStep(in *fsm.Incident) string {
	switch in.RepairStatus {
	case fsm.IncidentFailed:
		if strings.HasPrefix(in.Tag, fsm.MaintdFailedTagPrefix) {
			return fmt.Sprintf("look at the failed job (gnt job info ID); to retry, remove the node's tag: gnt node remove-tags %s %s (still observed, the incident comes back and its repair starts over); or forget it: gnt maint forget %s",
				in.Node, in.Tag, in.UUID)
		}
		return fmt.Sprintf("look at the failed job (gnt job info ID); to retry, forget the incident: gnt maint forget %s", in.UUID)
	case fsm.IncidentCompleted:
		return fmt.Sprintf("the node is ready for its repair; once repaired, remove its tag: gnt node remove-tags %s %s (forgotten once the node no longer reports it)", in.Node, in.Tag)
	case fsm.IncidentCanceled:
		return fmt.Sprintf("forgotten once the node no longer reports it; forget it now: gnt maint forget %s", in.UUID)
	case fsm.IncidentNoted, fsm.IncidentPending:
		return fmt.Sprintf("to stop it: gnt maint cancel %s", in.UUID)
	}
	return ""
}

// handleJob serves one job as the state has it (queued or archived).
func (s *Service) handleJob(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("job id must be a positive integer, got %q", r.PathValue("id")), "code": "invalid"})
		return
	}
	var v any
	s.FSM.Read(func(st *fsm.State, _ uint64) {
		if j := st.Jobs[id]; j != nil {
			v = j
		} else if a := st.Archived[id]; a != nil {
			v = a
		}
	})
	if v == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no job %d", id), "code": "noent"})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// maint returns a copy-free view of the maintenance state; callers only
// encode it.
func (s *Service) maint() *fsm.Maintenance {
	var m *fsm.Maintenance
	s.FSM.Read(func(st *fsm.State, _ uint64) { m = st.Maint() })
	return m
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Cancel marks an incident canceled: maintd takes no more action for it
// and forgets it once it is no longer observed.
func (s *Service) Cancel(r *http.Request, id string) (int, error) {
	resp, _, err := s.Apply.Apply(r.Context(), fsm.MaintIncident{Now: s.clock().UnixNano(), UUID: id, Action: fsm.IncidentActionCancel})
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	if resp.Err != nil {
		switch resp.Err.Code {
		case fsm.CodeNoEnt:
			return http.StatusNotFound, resp.Err
		case fsm.CodeState:
			return http.StatusConflict, resp.Err
		}
		return http.StatusBadRequest, resp.Err
	}
	return http.StatusOK, nil
}

func (s *Service) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	status, err := s.Cancel(r, id)
	if err != nil {
		var fe *fsm.Error
		code := "error"
		if errors.As(err, &fe) {
			code = string(fe.Code)
		}
		writeJSON(w, status, map[string]string{"error": err.Error(), "code": code})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"canceled": id})
}

// wantsHTML is content negotiation for "/": browsers (text/html before any
// JSON in Accept) get the page, API clients the version list.
func wantsHTML(r *http.Request) bool {
	acc := r.Header.Get("Accept")
	h := strings.Index(acc, "text/html")
	j := strings.Index(acc, "application/json")
	return h >= 0 && (j < 0 || h < j)
}

func (s *Service) handleRoot(w http.ResponseWriter, r *http.Request) {
	if !wantsHTML(r) {
		writeJSON(w, http.StatusOK, []int{1})
		return
	}
	p := s.Plan(r.Context())
	v := pageView{Plan: p, Now: s.clock().UTC().Format(time.RFC3339)}
	s.FSM.Read(func(st *fsm.State, index uint64) {
		m := st.Maint()
		v.Index, v.Round, v.RoundDelay = index, m.Round, m.RoundDelay
		if m.LastRound > 0 {
			v.LastRound = time.Unix(0, int64(m.LastRound*1e9)).UTC().Format(time.RFC3339)
		}
		for _, in := range m.Incidents {
			iv := incidentView{Incident: in, NextStep: NextStep(in), Failed: in.RepairStatus == fsm.IncidentFailed}
			for _, id := range in.Jobs {
				iv.Jobs = append(iv.Jobs, jobViewOf(st, id))
			}
			v.Incidents = append(v.Incidents, iv)
		}
		for _, id := range m.Jobs {
			v.Waiting = append(v.Waiting, jobViewOf(st, id))
		}
		master := ""
		if st.Cluster != nil {
			master = st.Cluster.MasterNode
		}
		for _, n := range p.Nodes {
			nv := nodeView{NodeStatus: n}
			if x := st.LookupNode(n.Name); x != nil {
				nv.Role = fsm.RoleOf(x, master)
			}
			v.Nodes = append(v.Nodes, nv)
		}
		for _, in := range p.Instances {
			if in.State != StateHealthy || in.Why != "" {
				iv := instanceView{InstanceStatus: in, Failed: in.State == StateFailed}
				for _, id := range in.Jobs {
					iv.JobViews = append(iv.JobViews, jobViewOf(st, id))
				}
				v.Instances = append(v.Instances, iv)
			}
		}
	})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := page.Execute(w, v); err != nil {
		s.log().Warn("maintd page", "error", err)
	}
}

type jobView struct {
	ID     int64
	Status string
	Failed bool
}

func jobViewOf(st *fsm.State, id int64) jobView {
	s := jobStatus(st, id)
	return jobView{ID: id, Status: orUnknown(s), Failed: s == "" || (fsm.Finalized(s) && s != fsm.StatusSuccess)}
}

type incidentView struct {
	*fsm.Incident
	Jobs     []jobView
	NextStep string
	Failed   bool
}

type nodeView struct {
	NodeStatus
	Role string // fsm.Role*: master, candidate, regular, drained, offline
}

type instanceView struct {
	InstanceStatus
	JobViews []jobView
	Failed   bool
}

type pageView struct {
	Plan       *RoundPlan
	Now        string
	Index      uint64
	Round      int64
	RoundDelay int64
	LastRound  string
	Incidents  []incidentView
	Waiting    []jobView
	Nodes      []nodeView
	Instances  []instanceView
}

var page = template.Must(template.New("maintd").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="3">
<title>gnt maintd</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top;font-size:90%}
th{background:#eee}.bad{color:#b00;font-weight:bold}.ok{color:#070}tr.failed{background:#fee}
code{font-size:85%}
</style></head><body>
<h1>gnt maintd</h1>
<p>Leader's view at {{.Now}} (Raft index {{.Index}}): round {{.Round}}{{if .LastRound}}, last recorded {{.LastRound}}{{end}}, rounds every {{.RoundDelay}} s. This page refreshes itself.</p>
{{with .Plan}}
{{if .NoQuorum}}<p class="bad">No action: {{.NoQuorum}}</p>{{end}}
{{if .Refused}}<p class="bad">The last round was refused by the state, {{.Refused}}</p>{{end}}
<p>Circuit breaker: {{if .Breaker.Open}}<span class="bad">open</span> — {{.Breaker.Reason}}{{else}}<span class="ok">closed</span> ({{len .Breaker.Unhealthy}} of {{.Breaker.Nodes}} nodes unhealthy, limit {{.Breaker.Limit}}){{if .Breaker.Overridden}} — {{.Breaker.Reason}}{{end}}{{end}}</p>
{{end}}
<h2>Incidents</h2>
{{if .Incidents}}<table><tr><th>id</th><th>node</th><th>action</th><th>repair-status</th><th>jobs</th><th>tag</th><th>why</th><th>next step</th><th>original</th></tr>
{{range .Incidents}}<tr{{if .Failed}} class="failed"{{end}}><td><code>{{.UUID}}</code></td><td>{{.Node}}</td><td>{{.Action}}</td><td{{if .Failed}} class="bad"{{end}}>{{.RepairStatus}}</td>
<td>{{range .Jobs}}{{template "job" .}} {{end}}</td><td><code>{{.Tag}}</code></td><td>{{.Reason}}</td><td>{{.NextStep}}</td><td><code>{{printf "%s" .Original}}</code></td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
{{if .Waiting}}<p>Jobs of the last round: {{range .Waiting}}{{template "job" .}} {{end}}</p>{{end}}
<h2>Nodes</h2>
<table><tr><th>node</th><th>role</th><th>liveness</th><th>self-diagnose</th><th>incident</th><th>down</th><th>what maintd does</th></tr>
{{range .Nodes}}<tr><td>{{.Name}}</td><td>{{.Role}}</td><td{{if eq .Liveness "dead"}} class="bad"{{end}}>{{.Liveness}}</td>
<td>{{.Diagnose}}</td><td>{{.Action}} <code>{{.Incident}}</code></td><td>{{.Down}}</td><td>{{.Why}}</td></tr>
{{end}}</table>
<h2>Instances needing attention</h2>
{{if .Instances}}<table><tr><th>instance</th><th>state</th><th>allowed</th><th>needed</th><th>repair</th><th>jobs</th><th>why</th></tr>
{{range .Instances}}<tr{{if .Failed}} class="failed"{{end}}><td>{{.Name}}</td><td{{if .Failed}} class="bad"{{end}}>{{.State}}</td><td>{{.Allowed}}</td><td>{{.Needed}}</td><td><code>{{.Repair}}</code></td><td>{{range .JobViews}}{{template "job" .}} {{end}}</td><td>{{.Why}}</td></tr>
{{end}}</table>{{else}}<p>None: every instance is healthy.</p>{{end}}
{{if .Plan.Notes}}<h2>Next round</h2><ul>{{range .Plan.Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</body></html>
{{define "job"}}<a href="/1/jobs/{{.ID}}"{{if .Failed}} class="bad"{{end}}>{{.ID}}</a>&nbsp;({{.Status}}){{end}}
`))
