package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Set and queue accounting after healing, as Jepsen's set-full and
// total-queue checkers do: every tag and every job has a unique value, so
// what the final state holds can be matched against what was attempted.
//
//   - lost: acknowledged but absent (a tag added and not removed, a job
//     whose id came back), or an acknowledged removal that came undone;
//   - unexpected: present but never attempted, or attempted and refused;
//   - duplicated: one submission present as several jobs (a job is found
//     by the unique comment of its opcode; a tag change by its tag);
//   - recovered: indeterminate writes that did take effect.

// SetResult is the outcome of the accounting.
type SetResult struct {
	Attempted, Acknowledged                 int
	Lost, Unexpected, Duplicated, Recovered int
	Violations                              []string
}

func (r *SetResult) violation(counter *int, format string, args ...any) {
	if counter != nil {
		*counter++
	}
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// CheckSets matches the final state against the history.
func CheckSets(ops []*Op, initial, final State) SetResult {
	var r SetResult
	for _, o := range ops {
		if o.IsWrite() {
			r.Attempted++
			if o.Outcome == OK {
				r.Acknowledged++
			}
		}
	}
	r.checkTags(ops, initial, final)
	r.checkDrained(ops, final)
	r.checkJobs(ops, final)
	return r
}

func (r *SetResult) checkTags(ops []*Op, initial, final State) {
	type fate struct{ add, del *Op }
	fates := map[string]map[string]*fate{} // object -> tag -> fate
	get := func(o *Op) *fate {
		if fates[o.Object] == nil {
			fates[o.Object] = map[string]*fate{}
		}
		f := fates[o.Object][o.Value]
		if f == nil {
			f = &fate{}
			fates[o.Object][o.Value] = f
		}
		return f
	}
	for _, o := range ops {
		switch o.Kind {
		case TagAdd:
			get(o).add = o
		case TagDel:
			get(o).del = o
		}
	}
	objects := map[string]bool{}
	for obj := range fates {
		objects[obj] = true
	}
	for obj := range final.Tags {
		objects[obj] = true
	}
	for _, obj := range sortedKeys(objects) {
		present := map[string]bool{}
		for _, t := range final.Tags[obj] {
			present[t] = true
		}
		for _, t := range initial.Tags[obj] {
			if !present[t] && fates[obj][t] == nil {
				r.violation(&r.Lost, "lost: tag %q of %s, there before the run, is gone", t, obj)
			}
		}
		for _, t := range sortedKeys(present) {
			if fates[obj][t] == nil && !slices.Contains(initial.Tags[obj], t) {
				r.violation(&r.Unexpected, "unexpected: tag %q on %s was never written", t, obj)
			}
		}
		tags := fates[obj]
		for _, t := range sortedKeys(tags) {
			f := tags[t]
			if f.add == nil {
				continue // a removal of a tag from before the run
			}
			has := present[t]
			delOK := f.del != nil && f.del.Outcome == OK
			delMaybe := f.del != nil && f.del.Outcome == Indeterminate
			switch f.add.Outcome {
			case OK:
				switch {
				case f.del != nil && f.del.Outcome == Failed && f.del.Code == "noent":
					r.violation(&r.Lost, "lost: the removal of acknowledged tag %q of %s found it absent: %s", t, obj, f.del.Describe())
				case delOK && has:
					r.violation(&r.Lost, "lost: acknowledged removal of tag %q of %s came undone: %s", t, obj, f.del.Describe())
				case !delOK && !delMaybe && !has:
					r.violation(&r.Lost, "lost: acknowledged tag %q of %s is absent after healing: %s", t, obj, f.add.Describe())
				}
			case Indeterminate:
				if has && delOK {
					r.violation(&r.Unexpected, "unexpected: tag %q of %s is present after an acknowledged removal: %s", t, obj, f.del.Describe())
				} else if has {
					r.Recovered++
				}
			case Failed:
				if has {
					r.violation(&r.Unexpected, "unexpected: tag %q of %s is present though its addition failed: %s", t, obj, f.add.Describe())
				}
			}
		}
	}
}

// checkDrained: a node's final drained flag is the one its last
// acknowledged write set, unless an indeterminate write may have come
// after it.
func (r *SetResult) checkDrained(ops []*Op, final State) {
	last := map[string]*Op{}
	maybe := map[string][]*Op{}
	for _, o := range ops {
		if o.Kind != DrainSet {
			continue
		}
		switch o.Outcome {
		case OK:
			if p := last[o.Object]; p == nil || o.Index > p.Index {
				last[o.Object] = o
			}
		case Indeterminate:
			maybe[o.Object] = append(maybe[o.Object], o)
		}
	}
	for _, obj := range sortedKeys(last) {
		o := last[obj]
		got, ok := final.Drained[nodeName(obj)]
		if !ok {
			r.violation(&r.Lost, "lost: node %s is gone", obj)
			continue
		}
		if fmt.Sprint(got) == o.Value {
			continue
		}
		explained := false
		for _, m := range maybe[obj] {
			explained = explained || m.Value == fmt.Sprint(got)
		}
		if !explained {
			r.violation(&r.Lost, "lost: %s is drained=%v after healing; the last acknowledged write was %s", obj, got, o.Describe())
		}
	}
}

func (r *SetResult) checkJobs(ops []*Op, final State) {
	byMarker := map[string][]Job{}
	byID := map[int64]Job{}
	tagJobs := map[string][]int64{} // "OP_TAGS_SET object tag" -> job ids
	archived := 0
	for _, j := range final.Jobs {
		byID[j.ID] = j
		if j.Archived {
			archived++
			continue
		}
		for _, op := range j.Ops {
			if op.Comment != "" {
				byMarker[op.Comment] = append(byMarker[op.Comment], j)
			}
			if op.OpID == "OP_TAGS_SET" || op.OpID == "OP_TAGS_DEL" {
				for _, t := range op.Tags {
					k := op.OpID + " " + tagObject(op.Kind, op.Name) + " " + t
					tagJobs[k] = append(tagJobs[k], j.ID)
				}
			}
		}
	}
	if archived > 0 {
		r.violation(nil, "unverifiable: %d jobs were archived during the run (their opcodes are gone); keep runs under the queue's retention", archived)
	}
	// A job asked to cancel may end canceled, and so may fail the job
	// that depends on it (the second of a pair).
	mayCancel := map[string]bool{}
	for _, o := range ops {
		if o.Kind == JobCancel {
			mayCancel[o.Markers[0]] = true
		}
	}
	for _, o := range ops {
		if o.Kind == JobSubmit && len(o.Markers) == 2 && mayCancel[o.Markers[0]] {
			mayCancel[o.Markers[1]] = true
		}
	}
	submitted := map[string]bool{}
	for _, o := range ops {
		switch o.Kind {
		case JobSubmit:
			for k, m := range o.Markers {
				submitted[m] = true
				found := byMarker[m]
				switch o.Outcome {
				case OK:
					switch {
					case len(found) == 0:
						r.violation(&r.Lost, "lost: job %s (id %d) is absent after healing: %s", m, idAt(o.JobIDs, k), o.Describe())
					case len(found) > 1:
						r.violation(&r.Duplicated, "duplicated: job %s is present %d times (ids %v)", m, len(found), jobIDs(found))
					case found[0].ID != idAt(o.JobIDs, k):
						r.violation(&r.Lost, "lost: job %s was acknowledged as id %d but is id %d", m, idAt(o.JobIDs, k), found[0].ID)
					case found[0].Status == "error" && len(found[0].PoisonEpochs) >= 2:
						// The poison-job guard failed it: two leaders were
						// lost in a row while it ran without progress,
						// which the faults (kill-all, stop-leader,
						// transfers) can do to any job. Its failure is the
						// guard's trade, recorded with the epochs.
					case found[0].Status != "success" && !(mayCancel[m] && (found[0].Status == "canceled" || found[0].Status == "error")):
						r.violation(nil, "job %s (id %d) ended %s, want success", m, found[0].ID, found[0].Status)
					case o.Mode == ModeHeld && finalStatus(o.Status) && o.Status != found[0].Status:
						r.violation(nil, "job %s (id %d): its held submission was answered %s, but it ended %s", m, found[0].ID, o.Status, found[0].Status)
					}
				case Indeterminate:
					switch len(found) {
					case 0:
					case 1:
						r.Recovered++
					default:
						r.violation(&r.Duplicated, "duplicated: job %s (indeterminate submission) is present %d times (ids %v)", m, len(found), jobIDs(found))
					}
				case Failed:
					if len(found) > 0 {
						r.violation(&r.Unexpected, "unexpected: job %s is present (ids %v) though its submission failed: %s", m, jobIDs(found), o.Describe())
					}
				}
			}
		case TagAdd, TagDel:
			op := map[Kind]string{TagAdd: "OP_TAGS_SET", TagDel: "OP_TAGS_DEL"}[o.Kind]
			ids := tagJobs[op+" "+o.Object+" "+o.Value]
			if len(ids) > 1 {
				r.violation(&r.Duplicated, "duplicated: %s of tag %q on %s is present as %d jobs %v", op, o.Value, o.Object, len(ids), ids)
			}
			if o.Outcome == OK && len(o.JobIDs) == 1 && !slices.Contains(ids, o.JobIDs[0]) {
				if j, ok := byID[o.JobIDs[0]]; !ok || !j.Archived {
					r.violation(&r.Lost, "lost: %s of tag %q on %s was acknowledged as job %d, which is not that job", op, o.Value, o.Object, o.JobIDs[0])
				}
			}
		}
	}
	for _, m := range sortedKeys(byMarker) {
		if !submitted[m] && strings.HasPrefix(m, markerPrefix) {
			r.violation(&r.Unexpected, "unexpected: job %s (ids %v) was never submitted", m, jobIDs(byMarker[m]))
		}
	}
}

// finalStatus says whether a job status is one a job ends with.
func finalStatus(s string) bool {
	return s == "success" || s == "error" || s == "canceled"
}

func idAt(ids []int64, k int) int64 {
	if k < len(ids) {
		return ids[k]
	}
	return 0
}

func jobIDs(js []Job) []int64 {
	var out []int64
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
