package rpc

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/qlang"
)

// WholeAnswer answers a GET of a listing or a query the way it was
// answered before answers were streamed: every item built from the live
// state under its read lock, the whole answer encoded by json.Marshal,
// with writeRaw's newline. It is the reference of TestStreamedAnswersAsWhole.
func WholeAnswer(b Backend, path string) ([]byte, error) {
	u, err := url.Parse(path)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	bulk := q.Get("bulk") == "1"
	var rt *Runtime
	if src, ok := b.(RuntimeSource); ok {
		v := src.Runtime()
		rt = &v
	}
	var v any
	b.FSM().Read(func(st *fsm.State, _ uint64) {
		switch {
		case u.Path == "/2/nodes":
			v = listing(bulk, st.SortedNodes(), nodeEntry, nodeObjects(st, rt))
		case u.Path == "/2/instances":
			v = listing(bulk, st.SortedInstances(), instanceEntry, instanceObjects(st, rt))
		case u.Path == "/2/groups":
			v = listing(bulk, st.SortedGroups(), groupEntry, groupObjects(st))
		case u.Path == "/2/jobs":
			// As before: the ids, each looked up in the queue or the
			// archive's map.
			ids := st.SortedJobIDs()
			if q.Get("archived") == "1" {
				ids = append(ids, st.ArchivedJobIDs()...)
				sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
			}
			v = listing(bulk, ids,
				func(id int64) any { return jobEntry(jobRef{id: id}) },
				func(id int64) any { j, _ := lookupJob(st, id); return jobObject(j, JobBulkFields) })
		case strings.HasPrefix(u.Path, "/2/query/"):
			qr := queryResources[strings.TrimPrefix(u.Path, "/2/query/")]
			if qr == nil {
				err = fmt.Errorf("no query resource in %s", path)
				return
			}
			var filter *qlang.Filter
			if q.Has("filter") {
				list, perr := qlang.Parse(q.Get("filter"))
				if perr != nil {
					err = perr
					return
				}
				var aerr *APIError
				if filter, aerr = compileFilter(qr, list, "filter"); aerr != nil {
					err = aerr
					return
				}
			}
			fields := splitFields(q.Get("fields"))
			res := QueryResult{Fields: qr.fieldDefs(fields), Data: [][][2]any{}}
			for row := range qr.queryData(qr.rows(st, rt), fields, filter) {
				res.Data = append(res.Data, row.([][2]any))
			}
			v = res
		default:
			err = fmt.Errorf("WholeAnswer does not know %s", path)
		}
	})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(body, '\n'), nil
}
