package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// The conformance table of Ganeti's documented RAPI contract
// (doc/rapi.rst of github.com/ganeti/ganeti), written from that document
// (docs/api.md, "Conformance suite"). One row is one resource and verb:
// what to send, the status class and body shape the document promises
// and, for objects, the field names it lists. TestRAPIConformance walks
// it against the leader and a follower.

// shape is the kind of JSON body a resource answers with.
type shape string

const (
	shapeNull      shape = "null"              // JSON null (/, /2, DELETE of a filter)
	shapeInt       shape = "integer"           // /version
	shapeJobID     shape = "job id"            // a job id: an integer (Ganeti: a number, or its string)
	shapeString    shape = "string"            // a plain string (role, a filter's uuid)
	shapeStrings   shape = "list of strings"   // tags, features, OS names
	shapeURIList   shape = "list of {id, uri}" // an index resource without bulk
	shapeObject    shape = "object"            // one object with fields
	shapeObjects   shape = "list of objects"   // bulk lists
	shapeQuery     shape = "query result"      // {"fields": [...], "data": [[[status, value], ...], ...]}
	shapeFieldDefs shape = "field definitions" // {"fields": [{name, title, kind, doc}, ...]}
	shapeList      shape = "list"              // any list (cancel: [bool, message])
)

// Ganeti's field lists, as doc/rapi.rst names them (I_FIELDS and the
// others; the document renders each list, sorted, under "Returned
// fields").
var (
	commonFields = []string{"ctime", "mtime", "uuid", "serial_no", "tags"}
	// iFields: instances, ?bulk=1 and single (I_FIELDS).
	iFields = append([]string{"name", "admin_state", "os", "pnode", "snodes", "disk_template",
		"nic.ips", "nic.macs", "nic.modes", "nic.uuids", "nic.names", "nic.links",
		"nic.networks", "nic.networks.names", "nic.bridges", "network_port",
		"disk.sizes", "disk.spindles", "disk_usage", "disk.uuids", "disk.names",
		"beparams", "hvparams", "oper_state", "oper_ram", "oper_vcpus", "status",
		"custom_hvparams", "custom_beparams", "custom_nicparams", "custom_osparams"}, commonFields...)
	// nFields: nodes (N_FIELDS).
	nFields = append([]string{"name", "offline", "master_candidate", "drained",
		"dtotal", "dfree", "sptotal", "spfree", "mtotal", "mnode", "mfree",
		"pinst_cnt", "sinst_cnt", "ctotal", "cnos", "cnodes", "csockets",
		"pip", "sip", "role", "pinst_list", "sinst_list",
		"master_capable", "vm_capable", "ndparams", "group.uuid"}, commonFields...)
	// gFields: node groups (G_FIELDS).
	gFields = append([]string{"alloc_policy", "name", "node_cnt", "node_list",
		"ipolicy", "custom_ipolicy", "diskparams", "custom_diskparams",
		"ndparams", "custom_ndparams"}, commonFields...)
	// netFields: networks (NET_FIELDS).
	netFields = append([]string{"name", "network", "gateway", "network6", "gateway6",
		"mac_prefix", "free_count", "reserved_count", "map", "group_list", "inst_list",
		"external_reservations"}, commonFields...)
	// filterFields: job filters (FILTER_RULE_FIELDS).
	filterFields = []string{"watermark", "priority", "predicates", "action", "reason_trail", "uuid"}
	// jBulkFields: GET /2/jobs?bulk=1 (J_FIELDS_BULK), unlike a single job.
	jBulkFields = []string{"id", "ops", "status", "summary", "opstatus", "received_ts", "start_ts", "end_ts"}
	// jFields: GET /2/jobs/[job_id] (J_FIELDS).
	jFields = append(slices.Clone(jBulkFields), "oplog", "opresult")
	// osFields: GET /2/os?bulk=1 (the document's example).
	osFields = []string{"name", "valid", "variants", "parameters", "api_versions", "blacklisted", "hidden", "trusted"}
	// infoFields: GET /2/info (the document's example).
	infoFields = []string{"config_version", "name", "software_version", "os_api_version",
		"export_version", "candidate_pool_size", "enabled_hypervisors", "hvparams",
		"default_hypervisor", "master", "architecture", "protocol_version", "beparams"}
	// consoleFields: GET /2/instances/[i]/console; the others (host,
	// port, user, command, display, message) depend on the kind.
	consoleFields = []string{"instance", "kind"}
	// features: GET /2/features (rlib2.ALL_FEATURES as the document
	// states it).
	features = []string{"instance-create-reqv1", "instance-reinstall-reqv1", "node-migrate-reqv1", "node-evac-res1"}
)

// rapiRow is one resource and verb of doc/rapi.rst.
type rapiRow struct {
	Method string
	// Path names the test's objects as {instance}, {node}, {group},
	// {filter}, {job}, {network}, {down} (an instance that is shut down),
	// {emptygroup} and {emptynet} (a group and a network connected to
	// nothing),
	// {newfilter} (made by an earlier row).
	Path  string
	Query string // without "?"; dry-run=1 where the row writes
	Body  string
	// Status is the expected status; 200 for every documented success.
	Status int
	Shape  shape
	// IDKey is the key naming the object in a list of {id, uri}.
	IDKey string
	// Fields are the documented fields of each object of the answer.
	Fields []string
	// Has are strings a list of strings must hold.
	Has []string
	// Save names the placeholder the answer (a string) fills for later
	// rows.
	Save string
	// JobFails: the job (a dry run) is expected to fail its checks with
	// this message, as Ganeti's would.
	JobFails string
	// Pending: not served on main yet; names what is missing. The row is
	// skipped with that message.
	Pending string
	// Deviation: gnt answers differently from the document, on purpose
	// or until fixed; Status and Shape are then what gnt answers, and
	// the test holds it to that.
	Deviation string
}

// rapiTable is every resource and verb of doc/rapi.rst, in the
// document's order. Writes carry dry-run=1 (every gnt opcode honours it:
// checks run, nothing is executed) or act on objects of their own
// (filters), so the walk leaves the cluster as it found it.
var rapiTable = []rapiRow{
	{Method: "GET", Path: "/", Status: 200, Shape: shapeNull},
	{Method: "GET", Path: "/2", Status: 200, Shape: shapeNull},
	{Method: "GET", Path: "/2/info", Status: 200, Shape: shapeObject, Fields: infoFields},
	{Method: "PUT", Path: "/2/redistribute-config", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/features", Status: 200, Shape: shapeStrings, Has: features},

	{Method: "GET", Path: "/2/filters", Status: 200, Shape: shapeURIList, IDKey: "uuid",
		Deviation: "the index names a filter by \"uuid\" as Ganeti's server does (rlib2 builds it with uri_fields uuid, uri); the document's example says \"id\""},
	{Method: "GET", Path: "/2/filters", Query: "bulk=1", Status: 200, Shape: shapeObjects, Fields: filterFields},
	{Method: "POST", Path: "/2/filters", Body: `{"priority": 900, "predicates": [["opcode", ["=", "OP_ID", "OP_NOSUCH_CONFORMANCE"]]], "action": "CONTINUE", "reason": [["conformance", "made by the conformance test", 1]]}`,
		Status: 200, Shape: shapeString, Save: "newfilter"},
	{Method: "GET", Path: "/2/filters/{filter}", Status: 200, Shape: shapeObject, Fields: filterFields},
	{Method: "PUT", Path: "/2/filters/{newfilter}", Body: `{"priority": 901, "predicates": [], "action": "CONTINUE", "uuid": "{newfilter}"}`,
		Status: 200, Shape: shapeString},
	{Method: "DELETE", Path: "/2/filters/{newfilter}", Status: 200, Shape: shapeNull},

	{Method: "PUT", Path: "/2/modify", Query: "dry-run=1", Body: `{"candidate_pool_size": 10}`, Status: 200, Shape: shapeJobID},

	{Method: "GET", Path: "/2/groups", Status: 200, Shape: shapeURIList, IDKey: "name"},
	{Method: "GET", Path: "/2/groups", Query: "bulk=1", Status: 200, Shape: shapeObjects, Fields: gFields},
	{Method: "POST", Path: "/2/groups", Query: "dry-run=1", Body: `{"group_name": "conformance9"}`, Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/groups/{group}", Status: 200, Shape: shapeObject, Fields: gFields},
	{Method: "DELETE", Path: "/2/groups/{emptygroup}", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/groups/{group}/modify", Query: "dry-run=1", Body: `{"alloc_policy": "preferred"}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/groups/{group}/rename", Query: "dry-run=1", Body: `{"new_name": "conformance8"}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/groups/{group}/assign-nodes", Query: "force=1&dry-run=1", Body: `{"nodes": ["node22"]}`, Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/groups/{group}/tags", Status: 200, Shape: shapeStrings, Has: []string{"conformance"}},
	{Method: "PUT", Path: "/2/groups/{group}/tags", Query: "tag=x1&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "DELETE", Path: "/2/groups/{group}/tags", Query: "tag=conformance&dry-run=1", Status: 200, Shape: shapeJobID},

	{Method: "GET", Path: "/2/networks", Status: 200, Shape: shapeURIList, IDKey: "name"},
	{Method: "GET", Path: "/2/networks", Query: "bulk=1", Status: 200, Shape: shapeObjects, Fields: netFields},
	{Method: "POST", Path: "/2/networks", Query: "dry-run=1", Body: `{"network_name": "conformance9", "network": "192.0.2.0/28"}`, Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/networks/{network}", Status: 200, Shape: shapeObject, Fields: netFields},
	{Method: "DELETE", Path: "/2/networks/{emptynet}", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/networks/{network}/modify", Query: "dry-run=1", Body: `{"gateway": "198.51.100.1"}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/networks/{network}/connect", Query: "dry-run=1", Body: `{"group_name": "default", "network_mode": "bridged", "network_link": "br0"}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/networks/{network}/disconnect", Query: "dry-run=1", Body: `{"group_name": "{group}"}`, Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/networks/{network}/tags", Status: 200, Shape: shapeStrings, Has: []string{"conformance"}},
	{Method: "PUT", Path: "/2/networks/{network}/tags", Query: "tag=x1&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "DELETE", Path: "/2/networks/{network}/tags", Query: "tag=conformance&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/networks/{network}/rename", Query: "dry-run=1", Body: `{"new_name": "conformance8"}`, Status: 200, Shape: shapeJobID},

	{Method: "POST", Path: "/2/instances-multi-alloc", Query: "dry-run=1", Body: `{"instances": [{"instance_name": "conformance9", "disk_template": "plain", "disks": [{"size": 1024}], "nics": [], "os_type": "debian", "beparams": {"memory": 128}, "pnode": "node22"}]}`,
		Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/instances", Status: 200, Shape: shapeURIList, IDKey: "id",
		Deviation: "the index names an instance by \"id\" as Ganeti's server does (rlib2 uri_fields id, uri); the document's example says \"name\""},
	{Method: "GET", Path: "/2/instances", Query: "bulk=1", Status: 200, Shape: shapeObjects, Fields: iFields},
	{Method: "POST", Path: "/2/instances", Query: "dry-run=1", Body: `{"__version__": 1, "instance_name": "conformance9", "disk_template": "plain", "disks": [{"size": 1024}], "nics": [], "os_type": "debian", "beparams": {"memory": 128}, "pnode": "node22"}`,
		Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/instances/{instance}", Status: 200, Shape: shapeObject, Fields: iFields},
	{Method: "DELETE", Path: "/2/instances/{instance}", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/instances/{instance}/info", Status: 200, Shape: shapeJobID},
	{Method: "POST", Path: "/2/instances/{instance}/reboot", Query: "type=soft&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{instance}/shutdown", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{instance}/startup", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "POST", Path: "/2/instances/{instance}/reinstall", Query: "dry-run=1", Body: `{"os": "debian", "start": true}`, Status: 200, Shape: shapeJobID},
	{Method: "POST", Path: "/2/instances/{instance}/replace-disks", Query: "dry-run=1", Body: `{"mode": "replace_auto"}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{instance}/activate-disks", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{down}/deactivate-disks", Query: "dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "POST", Path: "/2/instances/{down}/recreate-disks", Query: "dry-run=1", Body: `{}`, Status: 200, Shape: shapeJobID},
	{Method: "POST", Path: "/2/instances/{instance}/disk/0/grow", Query: "dry-run=1", Body: `{"amount": 1024}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{instance}/prepare-export", Query: "mode=local", Status: 501, Shape: shapeObject,
		Deviation: "501: gnt does not export or import instances across clusters"},
	{Method: "PUT", Path: "/2/instances/{instance}/export", Body: `{"mode": "local", "destination": "node22"}`, Status: 501, Shape: shapeObject,
		Deviation: "501: gnt does not export or import instances across clusters"},
	{Method: "DELETE", Path: "/2/instances/{instance}/export", Status: 501, Shape: shapeObject,
		Deviation: "501: gnt does not export or import instances across clusters"},
	{Method: "PUT", Path: "/2/instances/{instance}/migrate", Query: "dry-run=1", Body: `{}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{instance}/failover", Query: "dry-run=1", Body: `{}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{down}/rename", Query: "dry-run=1", Body: `{"new_name": "conformance8"}`, Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/instances/{instance}/modify", Query: "dry-run=1", Body: `{"beparams": {"maxmem": 512}}`, Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/instances/{instance}/console", Status: 200, Shape: shapeObject, Fields: consoleFields},
	{Method: "GET", Path: "/2/instances/{instance}/tags", Status: 200, Shape: shapeStrings, Has: []string{"conformance"}},
	{Method: "PUT", Path: "/2/instances/{instance}/tags", Query: "tag=x1&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "DELETE", Path: "/2/instances/{instance}/tags", Query: "tag=conformance&dry-run=1", Status: 200, Shape: shapeJobID},

	{Method: "GET", Path: "/2/jobs", Status: 200, Shape: shapeURIList, IDKey: "id"},
	{Method: "GET", Path: "/2/jobs", Query: "bulk=1", Status: 200, Shape: shapeObjects, Fields: jBulkFields},
	{Method: "GET", Path: "/2/jobs/{job}", Status: 200, Shape: shapeObject, Fields: jFields},
	// Cancelling a finished job: Ganeti answers [false, message].
	{Method: "DELETE", Path: "/2/jobs/{job}", Status: 200, Shape: shapeList},
	{Method: "GET", Path: "/2/jobs/{job}/wait", Body: `{"fields": ["status"], "previous_job_info": null, "previous_log_serial": null}`,
		Status: 200, Shape: shapeObject, Fields: []string{"job_info", "log_entries"}},

	{Method: "GET", Path: "/2/nodes", Status: 200, Shape: shapeURIList, IDKey: "id"},
	{Method: "GET", Path: "/2/nodes", Query: "bulk=1", Status: 200, Shape: shapeObjects, Fields: nFields},
	{Method: "GET", Path: "/2/nodes/{node}", Status: 200, Shape: shapeObject, Fields: nFields},
	{Method: "POST", Path: "/2/nodes/{node}/powercycle", Query: "dry-run=1", Status: 200, Shape: shapeJobID,
		JobFails: "does not support OOB commands"}, // the test's nodes have no OOB program
	{Method: "POST", Path: "/2/nodes/{node}/evacuate", Query: "dry-run=1", Body: `{"mode": "secondary-only"}`, Status: 200, Shape: shapeJobID},
	{Method: "POST", Path: "/2/nodes/{node}/migrate", Query: "dry-run=1", Body: `{}`, Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/nodes/{node}/role", Status: 200, Shape: shapeString},
	{Method: "PUT", Path: "/2/nodes/{node}/role", Query: "dry-run=1", Body: `"regular"`, Status: 200, Shape: shapeJobID},
	{Method: "POST", Path: "/2/nodes/{node}/modify", Query: "dry-run=1", Body: `{"drained": false}`, Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/nodes/{node}/storage", Query: "storage_type=file&output_fields=name,size", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/nodes/{node}/storage/modify", Query: "storage_type=lvm-pv&name=/dev/x&allocatable=1&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "PUT", Path: "/2/nodes/{node}/storage/repair", Query: "storage_type=lvm-vg&name=x&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "GET", Path: "/2/nodes/{node}/tags", Status: 200, Shape: shapeStrings, Has: []string{"conformance"}},
	{Method: "PUT", Path: "/2/nodes/{node}/tags", Query: "tag=x1&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "DELETE", Path: "/2/nodes/{node}/tags", Query: "tag=conformance&dry-run=1", Status: 200, Shape: shapeJobID},

	// /2/query: Ganeti's QR_VIA_RAPI are group, export, instance, job,
	// lock, network, node, filter.
	{Method: "GET", Path: "/2/query/instance", Query: "fields=name,status,pnode", Status: 200, Shape: shapeQuery},
	{Method: "PUT", Path: "/2/query/instance", Body: `{"fields": ["name", "admin_state"], "filter": ["=", "name", "{instance}"]}`, Status: 200, Shape: shapeQuery},
	{Method: "GET", Path: "/2/query/instance/fields", Status: 200, Shape: shapeFieldDefs},
	{Method: "GET", Path: "/2/query/node", Query: "fields=name,role", Status: 200, Shape: shapeQuery},
	{Method: "PUT", Path: "/2/query/node", Body: `{"fields": ["name"], "filter": ["|", ["=", "name", "{node}"], ["=~", "name", "^node1"]]}`, Status: 200, Shape: shapeQuery},
	{Method: "GET", Path: "/2/query/node/fields", Query: "fields=name,role", Status: 200, Shape: shapeFieldDefs},
	{Method: "GET", Path: "/2/query/group", Query: "fields=name,node_cnt", Status: 200, Shape: shapeQuery},
	{Method: "PUT", Path: "/2/query/group", Body: `{"fields": ["name"], "filter": ["!", ["=", "name", "nosuch"]]}`, Status: 200, Shape: shapeQuery},
	{Method: "GET", Path: "/2/query/group/fields", Status: 200, Shape: shapeFieldDefs},
	{Method: "GET", Path: "/2/query/job", Query: "fields=id,status", Status: 200, Shape: shapeQuery},
	{Method: "PUT", Path: "/2/query/job", Body: `{"fields": ["id", "status"], "filter": ["=", "status", "success"]}`, Status: 200, Shape: shapeQuery},
	{Method: "GET", Path: "/2/query/job/fields", Status: 200, Shape: shapeFieldDefs},
	{Method: "GET", Path: "/2/query/network", Query: "fields=name", Status: 200, Shape: shapeQuery},
	{Method: "PUT", Path: "/2/query/network", Body: `{"fields": ["name", "free_count"], "filter": ["=~", "name", "^conformance"]}`, Status: 200, Shape: shapeQuery},
	{Method: "GET", Path: "/2/query/network/fields", Status: 200, Shape: shapeFieldDefs},
	{Method: "GET", Path: "/2/query/filter", Query: "fields=uuid,priority,action", Status: 200, Shape: shapeQuery},
	{Method: "PUT", Path: "/2/query/filter", Body: `{"fields": ["uuid"], "filter": ["=", "uuid", "{filter}"]}`, Status: 200, Shape: shapeQuery},
	{Method: "GET", Path: "/2/query/filter/fields", Status: 200, Shape: shapeFieldDefs},
	{Method: "GET", Path: "/2/query/lock", Query: "fields=name", Status: 404, Shape: shapeObject,
		Deviation: "404: gnt has no lock manager to report (opcodes are serialized by the Raft log, not by locks)"},
	{Method: "GET", Path: "/2/query/export", Query: "fields=node", Status: 404, Shape: shapeObject,
		Deviation: "404: gnt does not export instances (see prepare-export and export)"},

	{Method: "GET", Path: "/2/os", Status: 200, Shape: shapeStrings},
	{Method: "GET", Path: "/2/os", Query: "bulk=1", Status: 200, Shape: shapeObjects, Fields: osFields},

	{Method: "GET", Path: "/2/tags", Status: 200, Shape: shapeStrings, Has: []string{"conformance"}},
	{Method: "PUT", Path: "/2/tags", Query: "tag=x1&dry-run=1", Status: 200, Shape: shapeJobID},
	{Method: "DELETE", Path: "/2/tags", Query: "tag=conformance&dry-run=1", Status: 200, Shape: shapeJobID},

	{Method: "GET", Path: "/version", Status: 200, Shape: shapeInt},
}

// checkShape checks body against row's shape and fields; it returns the
// fields the answer has beyond the documented ones (gnt's extensions).
func checkShape(row rapiRow, body []byte) (extra []string, err error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("body is not JSON: %v: %.200q", err, body)
	}
	objects := func(v any) ([]map[string]any, error) {
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("want a list, got %T", v)
		}
		out := make([]map[string]any, 0, len(list))
		for i, e := range list {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("element %d is %T, want an object", i, e)
			}
			out = append(out, m)
		}
		return out, nil
	}
	var objs []map[string]any
	switch row.Shape {
	case shapeNull:
		if v != nil {
			return nil, fmt.Errorf("want null, got %.200s", body)
		}
	case shapeInt, shapeJobID:
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) || (row.Shape == shapeJobID && f < 1) {
			return nil, fmt.Errorf("want %s, got %.200s", row.Shape, body)
		}
	case shapeString:
		if s, ok := v.(string); !ok || s == "" {
			return nil, fmt.Errorf("want a non-empty string, got %.200s", body)
		}
	case shapeStrings:
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("want a list of strings, got %.200s", body)
		}
		var have []string
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("want a list of strings, element %v is %T", e, e)
			}
			have = append(have, s)
		}
		for _, h := range row.Has {
			if !slices.Contains(have, h) {
				return nil, fmt.Errorf("%q missing from %v", h, have)
			}
		}
	case shapeList:
		if _, ok := v.([]any); !ok {
			return nil, fmt.Errorf("want a list, got %.200s", body)
		}
	case shapeURIList:
		list, err := objects(v)
		if err != nil {
			return nil, err
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("empty list, want the test's objects")
		}
		for _, m := range list {
			id, ok := m[row.IDKey]
			uri, _ := m["uri"].(string)
			if !ok || !strings.HasPrefix(uri, "/2/") || !strings.HasSuffix(uri, "/"+fmt.Sprint(id)) || len(m) != 2 {
				return nil, fmt.Errorf("element %v is not {%q, uri}", m, row.IDKey)
			}
		}
	case shapeObject:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("want an object, got %.200s", body)
		}
		objs = []map[string]any{m}
		if row.Status >= 400 {
			for _, k := range []string{"code", "message", "explain"} {
				if _, ok := m[k]; !ok {
					return nil, fmt.Errorf("error body lacks Ganeti's %q: %.300s", k, body)
				}
			}
		}
	case shapeObjects:
		list, err := objects(v)
		if err != nil {
			return nil, err
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("empty list, want the test's objects")
		}
		objs = list
	case shapeQuery:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("want {fields, data}, got %.200s", body)
		}
		defs, err := objects(m["fields"])
		if err != nil {
			return nil, fmt.Errorf("fields: %v", err)
		}
		rows, ok := m["data"].([]any)
		if !ok || len(rows) == 0 {
			return nil, fmt.Errorf("data: want a non-empty list, got %.200s", body)
		}
		for _, r := range rows {
			cells, ok := r.([]any)
			if !ok || len(cells) != len(defs) {
				return nil, fmt.Errorf("row %v does not have one cell per field (%d)", r, len(defs))
			}
			for _, c := range cells {
				pair, ok := c.([]any)
				if !ok || len(pair) != 2 {
					return nil, fmt.Errorf("cell %v is not [status, value]", c)
				}
				if _, ok := pair[0].(float64); !ok {
					return nil, fmt.Errorf("cell %v: status is not a number", c)
				}
			}
		}
		if err := fieldDefs(defs); err != nil {
			return nil, err
		}
	case shapeFieldDefs:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("want {fields}, got %.200s", body)
		}
		defs, err := objects(m["fields"])
		if err != nil {
			return nil, fmt.Errorf("fields: %v", err)
		}
		if len(defs) == 0 {
			return nil, fmt.Errorf("no field definitions")
		}
		if err := fieldDefs(defs); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("table: unknown shape %q", row.Shape)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		for _, f := range row.Fields {
			if _, ok := o[f]; !ok {
				return nil, fmt.Errorf("documented field %q missing from %.300v", f, o)
			}
		}
		if row.Fields == nil {
			continue
		}
		for k := range o {
			if !slices.Contains(row.Fields, k) && !seen[k] {
				seen[k] = true
				extra = append(extra, k)
			}
		}
	}
	sort.Strings(extra)
	return extra, nil
}

// fieldDefs checks Ganeti's query field definitions: name, title, kind
// and doc, all strings.
func fieldDefs(defs []map[string]any) error {
	for _, d := range defs {
		for _, k := range []string{"name", "title", "kind", "doc"} {
			if _, ok := d[k].(string); !ok {
				return fmt.Errorf("field definition %v lacks the string %q", d, k)
			}
		}
	}
	return nil
}

// TestRAPIConformanceTable checks the table itself: every row names a
// method, a path, a status and a shape; object rows name their fields;
// a deviation or pending row says why.
func TestRAPIConformanceTable(t *testing.T) {
	seen := map[string]bool{}
	for _, row := range rapiTable {
		key := row.Method + " " + row.Path + "?" + row.Query
		if seen[key] {
			t.Errorf("%s: listed twice", key)
		}
		seen[key] = true
		if row.Method == "" || !strings.HasPrefix(row.Path, "/") || row.Status == 0 || row.Shape == "" {
			t.Errorf("%s: incomplete row %+v", key, row)
		}
		if row.Shape == shapeURIList && row.IDKey == "" {
			t.Errorf("%s: a {id, uri} list names no id key", key)
		}
		if (row.Shape == shapeObjects) && row.Fields == nil {
			t.Errorf("%s: a bulk list names no fields", key)
		}
		if row.Status != 200 && row.Deviation == "" {
			t.Errorf("%s: status %d differs from the document's 200 without a deviation", key, row.Status)
		}
	}
	// Every resource of doc/rapi.rst has a row.
	for _, p := range []string{"/", "/2", "/2/info", "/2/redistribute-config", "/2/features",
		"/2/filters", "/2/filters/{filter}", "/2/modify", "/2/groups", "/2/groups/{group}",
		"/2/groups/{group}/modify", "/2/groups/{group}/rename", "/2/groups/{group}/assign-nodes",
		"/2/groups/{group}/tags", "/2/networks", "/2/networks/{network}", "/2/networks/{network}/modify",
		"/2/networks/{network}/connect", "/2/networks/{network}/disconnect", "/2/networks/{network}/tags",
		"/2/networks/{network}/rename", "/2/instances-multi-alloc", "/2/instances", "/2/instances/{instance}",
		"/2/instances/{instance}/info", "/2/instances/{instance}/reboot", "/2/instances/{instance}/shutdown",
		"/2/instances/{instance}/startup", "/2/instances/{instance}/reinstall",
		"/2/instances/{instance}/replace-disks", "/2/instances/{instance}/activate-disks",
		"/2/instances/{down}/deactivate-disks", "/2/instances/{down}/recreate-disks",
		"/2/instances/{instance}/disk/0/grow", "/2/instances/{instance}/prepare-export",
		"/2/instances/{instance}/export", "/2/instances/{instance}/migrate",
		"/2/instances/{instance}/failover", "/2/instances/{down}/rename",
		"/2/instances/{instance}/modify", "/2/instances/{instance}/console", "/2/instances/{instance}/tags",
		"/2/jobs", "/2/jobs/{job}", "/2/jobs/{job}/wait", "/2/nodes", "/2/nodes/{node}",
		"/2/nodes/{node}/powercycle", "/2/nodes/{node}/evacuate", "/2/nodes/{node}/migrate",
		"/2/nodes/{node}/role", "/2/nodes/{node}/modify", "/2/nodes/{node}/storage",
		"/2/nodes/{node}/storage/modify", "/2/nodes/{node}/storage/repair", "/2/nodes/{node}/tags",
		"/2/query/instance", "/2/query/instance/fields", "/2/os", "/2/tags", "/version"} {
		found := false
		for _, row := range rapiTable {
			if row.Path == p {
				found = true
			}
		}
		if !found {
			t.Errorf("doc/rapi.rst's %s has no row", p)
		}
	}
}

// TestRAPIConformance walks rapiTable against the leader and a follower
// of a cluster of 3 candidates and 2 nodes holding an instance, a group,
// a filter and tags: each answer's status and shape, each documented
// field present; the fields gnt serves beyond Ganeti's are logged.
// Writes are dry runs or act on objects of their own, and the state
// hash is the same after the walk as before it.
func TestRAPIConformance(t *testing.T) {
	c := NewCluster(t, ClusterOptions{Candidates: 3, Nodes: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	follower := c.Followers(leader)[0]
	for _, m := range []*Member{c.Member("node21"), c.Member("node22")} {
		c.WaitAgent(m, 30*time.Second)
	}
	gnt := func(args ...string) {
		t.Helper()
		if out, err := c.GNT(args...); err != nil {
			t.Fatalf("gnt %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	gnt("instance", "add", "-t", "drbd", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21:node22", "web1")
	gnt("instance", "add", "-t", "plain", "--disk", "1G", "--memory", "256", "--os-type", "debian", "-n", "node21", "web2")
	gnt("instance", "shutdown", "web2")
	gnt("group", "add", "conformance")
	gnt("group", "add", "conformance2")
	vars := map[string]string{"instance": "web1", "down": "web2", "emptygroup": "conformance2", "emptynet": "conformance2", "node": "node22", "group": "conformance", "network": "conformance"}
	put := func(path, body string) []byte {
		t.Helper()
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		r := rawAPI(ctx, c.HTTP(), "PUT", c.URL(leader, path+sep+"wait=30s"), []byte(body))
		if r.Err != nil || r.Status != 200 {
			t.Fatalf("PUT %s: %d %v %s", path, r.Status, r.Err, r.Body)
		}
		return r.Body
	}
	var r rawResult
	for _, net := range []string{`{"network_name": "conformance", "network": "198.51.100.0/28", "gateway": "198.51.100.1"}`, `{"network_name": "conformance2", "network": "203.0.113.0/28"}`} {
		r = rawAPI(ctx, c.HTTP(), "POST", c.URL(leader, "/2/networks?wait=30s"), []byte(net))
		if r.Err != nil || r.Status != 200 {
			t.Fatalf("POST /2/networks: %d %v %s", r.Status, r.Err, r.Body)
		}
	}
	put("/2/networks/conformance/connect", `{"group_name": "conformance", "network_mode": "bridged", "network_link": "br0"}`)
	for _, p := range []string{"/2/tags", "/2/instances/web1/tags", "/2/nodes/node22/tags", "/2/groups/conformance/tags", "/2/networks/conformance/tags"} {
		vars["job"] = strings.TrimSpace(string(put(p+"?tag=conformance", "")))
	}
	r = rawAPI(ctx, c.HTTP(), "POST", c.URL(leader, "/2/filters"),
		[]byte(`{"priority": 800, "predicates": [["opcode", ["=", "OP_ID", "OP_NOSUCH_CONFORMANCE"]]], "action": "CONTINUE"}`))
	var uuid string
	if r.Err != nil || r.Status != 200 || json.Unmarshal(r.Body, &uuid) != nil {
		t.Fatalf("POST /2/filters: %d %v %s", r.Status, r.Err, r.Body)
	}
	vars["filter"] = uuid
	c.WaitConverged(30 * time.Second)
	before := objectSerials(ctx, t, c, leader)

	expand := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, "{"+k+"}", v)
		}
		return s
	}
	extensions := map[string][]string{}
	var pending, deviations []string
	type submitted struct{ what, id, fails string }
	var jobs []submitted
	for _, m := range []*Member{leader, follower} {
		for _, row := range rapiTable {
			name := row.Method + " " + row.Path
			if row.Query != "" {
				name += "?" + row.Query
			}
			if row.Pending != "" {
				if m == leader {
					pending = append(pending, fmt.Sprintf("%s (pending: %s)", name, row.Pending))
				}
				continue
			}
			if row.Deviation != "" && m == leader {
				deviations = append(deviations, fmt.Sprintf("%s: %s", name, row.Deviation))
			}
			u := expand(row.Path)
			if row.Query != "" {
				u += "?" + expand(row.Query)
			}
			var body []byte
			if row.Body != "" {
				body = []byte(expand(row.Body))
			}
			res := rawAPI(ctx, c.HTTP(), row.Method, c.URL(m, u), body)
			if res.Err != nil && res.Status < 300 {
				t.Errorf("%s on %s: %v", name, m.Name, res.Err)
				continue
			}
			if res.Status != row.Status {
				t.Errorf("%s on %s: status %d, want %d: %.300s", name, m.Name, res.Status, row.Status, res.Body)
				continue
			}
			extra, err := checkShape(row, res.Body)
			if err != nil {
				t.Errorf("%s on %s: %s: %v", name, m.Name, row.Shape, err)
				continue
			}
			if len(extra) > 0 && m == leader {
				extensions[name] = extra
			}
			if row.Shape == shapeJobID && row.Status == 200 {
				jobs = append(jobs, submitted{name + " on " + m.Name, strings.TrimSpace(string(res.Body)), row.JobFails})
			}
			if row.Save != "" {
				var s string
				_ = json.Unmarshal(res.Body, &s)
				vars[row.Save] = s
			}
		}
	}
	var names []string
	for k := range extensions {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.Logf("gnt's fields beyond Ganeti's in %s: %s", k, strings.Join(extensions[k], " "))
	}
	for _, p := range pending {
		t.Logf("skipped, not served yet: %s", p)
	}
	for _, d := range deviations {
		t.Logf("known deviation: %s", d)
	}
	// Every job the walk submitted (dry runs, and the instance info
	// query) passed its checks.
	for _, j := range jobs {
		var job struct {
			Status   string `json:"status"`
			OpResult any    `json:"opresult"`
		}
		c.Eventually(60*time.Second, 100*time.Millisecond, j.what+" finishes", func() error {
			r := rawAPI(ctx, c.HTTP(), "GET", c.URL(leader, "/2/jobs/"+j.id), nil)
			if r.Status != 200 || json.Unmarshal(r.Body, &job) != nil {
				return fmt.Errorf("job %s: %d %s", j.id, r.Status, r.Body)
			}
			if job.Status != "success" && job.Status != "error" && job.Status != "canceled" {
				return fmt.Errorf("job %s is %s", j.id, job.Status)
			}
			return nil
		})
		if j.fails != "" {
			if job.Status != "error" || !strings.Contains(fmt.Sprint(job.OpResult), j.fails) {
				t.Errorf("%s: job %s %s: %v, want an error saying %q", j.what, j.id, job.Status, job.OpResult, j.fails)
			}
			continue
		}
		if job.Status != "success" {
			t.Errorf("%s: job %s %s: %v", j.what, j.id, job.Status, job.OpResult)
		}
	}
	// The walk changed nothing: dry runs and the filter made and removed
	// leave the state as it was, apart from the job records.
	r = rawAPI(ctx, c.HTTP(), "GET", c.URL(leader, "/2/filters"), nil)
	if r.Status != 200 || strings.Contains(string(r.Body), vars["newfilter"]) && vars["newfilter"] != "" {
		t.Errorf("the filter the walk made is still there: %s", r.Body)
	}
	after := objectSerials(ctx, t, c, leader)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s moved during the walk (a dry run acted?): %s -> %s", k, v, after[k])
		}
	}
}

// objectSerials reads the serial_no and tags of the objects the walk's
// dry runs name, and the cluster's tags.
func objectSerials(ctx context.Context, t *testing.T, c *Cluster, m *Member) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range []string{"/2/instances/web1", "/2/instances/web2", "/2/groups/conformance", "/2/networks/conformance", "/2/nodes/node22", "/2/nodes/node21"} {
		r := rawAPI(ctx, c.HTTP(), "GET", c.URL(m, p), nil)
		var o map[string]any
		if r.Status != 200 || json.Unmarshal(r.Body, &o) != nil {
			t.Fatalf("GET %s: %d %s", p, r.Status, r.Body)
		}
		out[p] = fmt.Sprint(o["serial_no"], o["tags"], o["name"])
	}
	r := rawAPI(ctx, c.HTTP(), "GET", c.URL(m, "/2/tags"), nil)
	out["/2/tags"] = string(r.Body)
	return out
}
