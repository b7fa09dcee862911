package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Dependency is one element of an opcode's depends list: Ganeti's
// [job_id, [statuses]]. A negative JobID is relative to the job itself
// within one submission of several jobs (-1 is the job submitted just
// before it); an empty status list accepts every final status except
// canceled.
type Dependency struct {
	JobID    int64
	Statuses []string
}

// MarshalJSON writes the Ganeti pair.
func (d Dependency) MarshalJSON() ([]byte, error) {
	st := d.Statuses
	if st == nil {
		st = []string{}
	}
	return json.Marshal([]any{d.JobID, st})
}

// UnmarshalJSON reads the Ganeti pair.
func (d *Dependency) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 2 {
		return fmt.Errorf("a dependency must be [job_id, [statuses]]")
	}
	var id json.Number
	dec := json.NewDecoder(bytes.NewReader(raw[0]))
	dec.UseNumber()
	if err := dec.Decode(&id); err != nil {
		return fmt.Errorf("dependency job id must be an integer, got %s", raw[0])
	}
	n, err := id.Int64()
	if err != nil {
		return fmt.Errorf("dependency job id must be an integer, got %s", raw[0])
	}
	var st []string
	if err := json.Unmarshal(raw[1], &st); err != nil {
		return fmt.Errorf("dependency statuses must be a list of strings, got %s", raw[1])
	}
	d.JobID, d.Statuses = n, st
	return nil
}

// Dependencies decodes and checks the depends field: ids must not be 0,
// statuses must be final ones.
func (c *OpCommon) Dependencies() ([]Dependency, *Error) {
	if len(c.Depends) == 0 || string(c.Depends) == "null" {
		return nil, nil
	}
	var deps []Dependency
	if err := json.Unmarshal(c.Depends, &deps); err != nil {
		return nil, errf(CodeInval, "depends", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	for _, d := range deps {
		if d.JobID == 0 {
			return nil, errf(CodeInval, "depends", "dependency job id 0 is not a job (use a positive id, or -1 for the previous job of the submission)")
		}
		for _, s := range d.Statuses {
			if !Finalized(s) {
				return nil, errf(CodeInval, "depends", "dependency status %q is not a final status (canceled, success, error)", s)
			}
		}
	}
	return deps, nil
}

// resolveDeps turns the dependencies of the job with id own, the k-th of
// its submission (whose first job gets id first), into absolute ids and
// checks that each names an earlier job that exists.
func (s *State) resolveDeps(deps []Dependency, own, first int64) ([]Dependency, *Error) {
	var out []Dependency
	for _, d := range deps {
		id := d.JobID
		if id < 0 {
			id = own + d.JobID
			if id < first {
				return nil, errf(CodeInval, "depends", "relative dependency %d of job %d points before the jobs submitted together with it (relative ids name jobs of the same submission)", d.JobID, own)
			}
		}
		switch {
		case id == own:
			return nil, errf(CodeInval, "depends", "job %d cannot depend on itself", own)
		case id > own:
			return nil, errf(CodeInval, "depends", "job %d cannot depend on job %d, which does not exist yet", own, id)
		case id < first && s.Jobs[id] == nil && s.Archived[id] == nil:
			return nil, errf(CodeNoEnt, "depends", "dependency job %d does not exist", id)
		}
		out = append(out, Dependency{JobID: id, Statuses: d.Statuses})
	}
	return out, nil
}

// DepVerdict is what a job's dependencies say about running its next
// opcode, as Ganeti's _JobDependencyManager decides.
type DepVerdict int

// Dependency verdicts.
const (
	DepContinue    DepVerdict = iota // every dependency finished as accepted
	DepWait                          // a dependency has not finished yet
	DepCancel                        // a dependency was canceled and that is not accepted
	DepWrongStatus                   // a dependency finished with a status not in its list
)

// CheckDependencies evaluates the dependencies of opcode idx of job j
// against the state, with the message Ganeti would log.
func (s *State) CheckDependencies(j *Job, idx int) (DepVerdict, string) {
	if idx < 0 || idx >= len(j.Ops) {
		return DepContinue, ""
	}
	for _, d := range j.Ops[idx].Depends {
		status := ""
		if dj := s.Jobs[d.JobID]; dj != nil {
			status = dj.Status
		} else if a := s.Archived[d.JobID]; a != nil {
			status = a.Status
		} else {
			return DepWrongStatus, fmt.Sprintf("Dependency job %d is no longer known (purged from the archive)", d.JobID)
		}
		accepted := func(st string) bool {
			for _, x := range d.Statuses {
				if x == st {
					return true
				}
			}
			return false
		}
		switch {
		case !Finalized(status):
			return DepWait, fmt.Sprintf("Need to wait for job %d, wanted status '%s'", d.JobID, strings.Join(d.Statuses, ","))
		case status == StatusCanceled && !accepted(StatusCanceled):
			return DepCancel, fmt.Sprintf("Dependency job %d was cancelled", d.JobID)
		case len(d.Statuses) == 0 || accepted(status):
		default:
			return DepWrongStatus, fmt.Sprintf("Dependency job %d finished with status '%s', not one of '%s'", d.JobID, status, strings.Join(d.Statuses, ","))
		}
	}
	return DepContinue, ""
}
