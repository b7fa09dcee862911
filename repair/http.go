package repair

import (
	"encoding/json"
	"errors"
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
//	GET  /1/status     the incidents
//	GET  /1/jobs       the jobs maintd waits for
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
		writeJSON(w, http.StatusOK, s.maint().Incidents)
	})
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
			iv := incidentView{Incident: in}
			for _, id := range in.Jobs {
				iv.Jobs = append(iv.Jobs, jobView{ID: id, Status: orUnknown(jobStatus(st, id))})
			}
			v.Incidents = append(v.Incidents, iv)
		}
		for _, id := range m.Jobs {
			v.Waiting = append(v.Waiting, jobView{ID: id, Status: orUnknown(jobStatus(st, id))})
		}
	})
	for _, in := range p.Instances {
		if in.State != StateHealthy || in.Why != "" {
			v.Instances = append(v.Instances, in)
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := page.Execute(w, v); err != nil {
		s.log().Warn("maintd page", "error", err)
	}
}

type jobView struct {
	ID     int64
	Status string
}

type incidentView struct {
	*fsm.Incident
	Jobs []jobView
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
	Instances  []InstanceStatus
}

var page = template.Must(template.New("maintd").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="3">
<title>gnt maintd</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top;font-size:90%}
th{background:#eee}.bad{color:#b00;font-weight:bold}.ok{color:#070}
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
{{if .Incidents}}<table><tr><th>id</th><th>node</th><th>action</th><th>repair-status</th><th>jobs</th><th>tag</th><th>why</th><th>original</th></tr>
{{range .Incidents}}<tr><td><code>{{.UUID}}</code></td><td>{{.Node}}</td><td>{{.Action}}</td><td>{{.RepairStatus}}</td>
<td>{{range .Jobs}}{{.ID}}&nbsp;({{.Status}}) {{end}}</td><td><code>{{.Tag}}</code></td><td>{{.Reason}}</td><td><code>{{printf "%s" .Original}}</code></td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
{{if .Waiting}}<p>Jobs of the last round: {{range .Waiting}}{{.ID}}&nbsp;({{.Status}}) {{end}}</p>{{end}}
<h2>Nodes</h2>
<table><tr><th>node</th><th>liveness</th><th>flags</th><th>self-diagnose</th><th>incident</th><th>down</th><th>what maintd does</th></tr>
{{range .Plan.Nodes}}<tr><td>{{.Name}}</td><td>{{.Liveness}}</td><td>{{if .Offline}}offline {{end}}{{if .Drained}}drained{{end}}</td>
<td>{{.Diagnose}}</td><td>{{.Action}} <code>{{.Incident}}</code></td><td>{{.Down}}</td><td>{{.Why}}</td></tr>
{{end}}</table>
<h2>Instances needing attention</h2>
{{if .Instances}}<table><tr><th>instance</th><th>state</th><th>allowed</th><th>needed</th><th>repair</th><th>jobs</th><th>why</th></tr>
{{range .Instances}}<tr><td>{{.Name}}</td><td>{{.State}}</td><td>{{.Allowed}}</td><td>{{.Needed}}</td><td><code>{{.Repair}}</code></td><td>{{.Jobs}}</td><td>{{.Why}}</td></tr>
{{end}}</table>{{else}}<p>None: every instance is healthy.</p>{{end}}
{{if .Plan.Notes}}<h2>Next round</h2><ul>{{range .Plan.Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))
