package rpc

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// jobRoute is an endpoint whose request becomes a job: build turns the
// request into its opcodes.
type jobRoute struct {
	method, path string
	build        opsBuilder
}

// jobRoutes are the endpoints of docs/api.md that submit a job. routes
// serves each through jobHandler; CheckWrite runs their checks in a
// client.
var jobRoutes = []jobRoute{
	{"PUT", "/2/modify", buildClusterModify},
	{"PUT", "/2/tags", buildTags("OP_TAGS_SET", fsm.TagCluster, "")},
	{"DELETE", "/2/tags", buildTags("OP_TAGS_DEL", fsm.TagCluster, "")},
	{"POST", "/2/nodes", buildNodeAdd},
	{"DELETE", "/2/nodes/{name}", buildNodeRemove},
	{"PUT", "/2/nodes/{name}/modify", buildNodeModify},
	{"POST", "/2/nodes/{name}/modify", buildNodeModify}, // the verb of Ganeti's client
	{"POST", "/2/nodes/{name}/evacuate", nodeOp("OP_NODE_EVACUATE")},
	{"POST", "/2/nodes/{name}/migrate", nodeOp("OP_NODE_MIGRATE")},
	{"PUT", "/2/nodes/{name}/role", buildNodeRole},
	{"POST", "/2/nodes/{name}/powercycle", buildNodePowercycle},
	// Storage units (handlers_storage.go): the listing is a job and
	// needs write access, as in Ganeti.
	{"GET", "/2/nodes/{name}/storage", buildNodeStorage},
	{"PUT", "/2/nodes/{name}/storage/modify", buildNodeStorageModify},
	{"PUT", "/2/nodes/{name}/storage/repair", buildNodeStorageRepair},
	{"PUT", "/2/nodes/{name}/tags", buildTags("OP_TAGS_SET", fsm.TagNode, "name")},
	{"DELETE", "/2/nodes/{name}/tags", buildTags("OP_TAGS_DEL", fsm.TagNode, "name")},
	{"POST", "/2/groups", buildGroupAdd},
	{"PUT", "/2/groups/{name}/modify", buildGroupModify},
	{"DELETE", "/2/groups/{name}", buildGroupRemove},
	{"PUT", "/2/groups/{name}/tags", buildTags("OP_TAGS_SET", fsm.TagNodeGroup, "name")},
	{"DELETE", "/2/groups/{name}/tags", buildTags("OP_TAGS_DEL", fsm.TagNodeGroup, "name")},
	{"PUT", "/2/groups/{name}/rename", buildGroupRename},            // handlers_more.go
	{"PUT", "/2/groups/{name}/assign-nodes", buildGroupAssignNodes}, // handlers_more.go
	{"PUT", "/2/redistribute-config", buildRedistConf},              // handlers_more.go
	{"POST", "/2/instances", buildInstanceCreate},
	{"DELETE", "/2/instances/{name}", instanceOp("OP_INSTANCE_REMOVE", "ignore_failures")},
	{"PUT", "/2/instances/{name}/startup", instanceOp("OP_INSTANCE_STARTUP", "force", "no_remember")},
	{"PUT", "/2/instances/{name}/shutdown", instanceOp("OP_INSTANCE_SHUTDOWN", "no_remember")},
	{"POST", "/2/instances/{name}/reboot", instanceOp("OP_INSTANCE_REBOOT", "ignore_secondaries")},
	{"PUT", "/2/instances/{name}/failover", instanceOp("OP_INSTANCE_FAILOVER")},
	{"PUT", "/2/instances/{name}/migrate", instanceOp("OP_INSTANCE_MIGRATE")},
	{"POST", "/2/instances/{name}/create", buildInstanceCommit},
	{"POST", "/2/instances/{name}/reinstall", buildReinstall},
	{"POST", "/2/instances/{name}/replace-disks", instanceOp("OP_INSTANCE_REPLACE_DISKS")},
	{"POST", "/2/instances/{name}/recreate-disks", instanceOp("OP_INSTANCE_RECREATE_DISKS")},
	{"PUT", "/2/instances/{name}/rename", instanceOp("OP_INSTANCE_RENAME")},
	{"PUT", "/2/instances/{name}/modify", instanceOp("OP_INSTANCE_SET_PARAMS")},
	{"POST", "/2/instances/{name}/disk/{disk}/grow", buildGrowDisk}, // handlers_more.go
	{"PUT", "/2/instances/{name}/activate-disks", instanceOp("OP_INSTANCE_ACTIVATE_DISKS", "ignore_size")},
	{"PUT", "/2/instances/{name}/deactivate-disks", instanceOp("OP_INSTANCE_DEACTIVATE_DISKS", "force")},
	{"PUT", "/2/instances/{name}/tags", buildTags("OP_TAGS_SET", fsm.TagInstance, "name")},
	{"DELETE", "/2/instances/{name}/tags", buildTags("OP_TAGS_DEL", fsm.TagInstance, "name")},
	{"POST", "/2/networks", buildNetworkAdd}, // handlers_network.go
	{"DELETE", "/2/networks/{name}", buildNetworkRemove},
	{"PUT", "/2/networks/{name}/modify", networkOp("OP_NETWORK_SET_PARAMS")},
	{"PUT", "/2/networks/{name}/connect", networkOp("OP_NETWORK_CONNECT")},
	{"PUT", "/2/networks/{name}/disconnect", networkOp("OP_NETWORK_DISCONNECT")},
	{"PUT", "/2/networks/{name}/rename", buildNetworkRename},
	{"PUT", "/2/networks/{name}/tags", buildTags("OP_TAGS_SET", fsm.TagNetwork, "name")},
	{"DELETE", "/2/networks/{name}/tags", buildTags("OP_TAGS_DEL", fsm.TagNetwork, "name")},
	{"POST", "/2/jobs", buildJobOps},
}

// checkMux routes a request to its jobRoute's checks; see CheckWrite.
var checkMux = func() *http.ServeMux {
	mux := http.NewServeMux()
	for _, jr := range jobRoutes {
		build := jr.build
		mux.HandleFunc(jr.method+" "+jr.path, func(w http.ResponseWriter, r *http.Request) {
			w.(*checkResult).err = checkJob(r, w.(*checkResult).body, build)
		})
	}
	mux.HandleFunc("POST /2/gnt/jobs", func(w http.ResponseWriter, r *http.Request) {
		w.(*checkResult).err = checkSubmitJobs(w.(*checkResult).body)
	})
	return mux
}()

// checkResult is the ResponseWriter checkMux's handlers get: they leave
// their verdict in it and write nothing.
type checkResult struct {
	body []byte
	err  *APIError
}

func (c *checkResult) Header() http.Header         { return http.Header{} }
func (c *checkResult) Write(b []byte) (int, error) { return len(b), nil }
func (c *checkResult) WriteHeader(int)             {}

// CheckWrite runs, in a client, the checks the API runs on a write before
// anything is queued: the limits (docs/api.md, "Limits"), strict JSON and
// every opcode's validation (fsm.ParseOpcode), for the endpoints that
// submit jobs (POST /2/gnt/jobs included). It needs no server and no
// state: what depends on the cluster (names that exist, room on nodes) is
// left to the leader. Other endpoints pass. body is the request body as
// it will be sent; one beyond DefaultMaxBody is refused as the server
// refuses it by default.
func CheckWrite(method, path string, q url.Values, body []byte) *APIError {
	r, err := http.NewRequest(method, "http://check"+path, nil)
	if err != nil {
		return badRequest("path", "bad request path %q: %v", path, err)
	}
	r.URL.RawQuery = q.Encode()
	if len(body) > DefaultMaxBody {
		return &APIError{Status: http.StatusRequestEntityTooLarge, ErrorCode: CodeTooLarge,
			Message: fmt.Sprintf("request body is larger than %d bytes", DefaultMaxBody)}
	}
	res := &checkResult{body: body}
	checkMux.ServeHTTP(res, r)
	return res.err
}

// checkJob is what jobHandler checks of a request before it submits it.
func checkJob(r *http.Request, body []byte, build opsBuilder) *APIError {
	if _, err := queryWait(r.URL.Query(), 0, MaxJobWait); err != nil {
		return err
	}
	_, _, aerr := clientChecks.prepareOps(r, body, build, time.Now())
	return aerr
}

// clientChecks is the Server prepareOps runs as in a client: it has no
// backend, and leaves what only a gntd can check (that an oob_program
// is a helper it has) to the server.
var clientChecks = &Server{b: noServerChecks{}}

// noServerChecks is the backend of clientChecks: it answers only the
// OOB helper and iallocator checks, which it passes; prepareOps calls
// nothing else.
type noServerChecks struct{ Backend }

// CheckOOBProgram implements oobChecker: a client cannot tell.
func (noServerChecks) CheckOOBProgram(string) error { return nil }

// CheckIAllocator implements iallocChecker: a client cannot tell either
// (the list's syntax is checked all the same).
func (noServerChecks) CheckIAllocator(string) error { return nil }

// checkSubmitJobs is what handleSubmitJobs checks of a body before it
// submits it, without the state.
func checkSubmitJobs(body []byte) *APIError {
	var req SubmitJobsRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		return aerr
	}
	if e := fsm.CheckSubmissionSize(len(req.Jobs), func(k int) int { return len(req.Jobs[k]) }); e != nil {
		return FromFSM(e)
	}
	for k, ops := range req.Jobs {
		for i, raw := range ops {
			if _, err := fsm.ParseOpcode(raw); err != nil {
				e := fsm.AsError(err)
				return FromFSM(&fsm.Error{Code: e.Code, Field: e.Field, Msg: fmt.Sprintf("job %d, opcode %d: %s", k, i, e.Msg)})
			}
		}
	}
	return nil
}
