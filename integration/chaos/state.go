package chaos

import (
	"encoding/json"

	"github.com/gnt-cluster/gnt/rpc"
)

// State is what the checkers need of the cluster's state: read before the
// workload starts (the initial state) and after healing (the final one),
// through consistent reads.
type State struct {
	// Tags are each object's tags, sorted.
	Tags map[string][]string `json:"tags"`
	// Drained is each node's drained flag.
	Drained map[string]bool `json:"drained"`
	// Jobs are the jobs of the queue (the final state only).
	Jobs []Job `json:"jobs,omitempty"`
}

// Job is a job as the checkers see it.
type Job struct {
	ID       int64   `json:"id"`
	Status   string  `json:"status"`
	Archived bool    `json:"archived,omitempty"`
	Ops      []JobOp `json:"ops"`
	// PoisonEpochs are the executor epochs whose leaders were lost while
	// the job ran without progress, when the poison-job guard failed it.
	PoisonEpochs []uint64 `json:"poison_epochs,omitempty"`
}

// JobOp is one opcode of a job: the fields of its input the workload
// sets, and what the executor recorded.
type JobOp struct {
	OpID    string `json:"OP_ID"`
	Comment string `json:"comment,omitempty"`
	// Tag opcodes: the object and tags.
	Kind string   `json:"kind,omitempty"`
	Name string   `json:"name,omitempty"`
	Tags []string `json:"tags,omitempty"`
	// OP_TEST_DELAY: the number of steps.
	Repeat int    `json:"repeat,omitempty"`
	Status string `json:"-"`
	Steps  []Step `json:"-"`
}

// Step is a recorded step of an opcode.
type Step struct {
	Name  string `json:"name"`
	Epoch uint64 `json:"epoch"`
}

// StepCount returns the opcode's step count: OP_TEST_DELAY runs one step per
// repetition, at least one.
func (o JobOp) StepCount() int { return max(o.Repeat, 1) }

// jobFromInfo turns the API's view of a job into a Job.
func jobFromInfo(j rpc.JobInfo, archived bool) Job {
	out := Job{ID: j.ID, Status: j.Status, Archived: archived || j.Archived, PoisonEpochs: j.PoisonEpochs}
	for i, raw := range j.Ops {
		var op JobOp
		json.Unmarshal(raw, &op)
		if i < len(j.OpStatus) {
			op.Status = j.OpStatus[i]
		}
		if i < len(j.OpSteps) {
			for _, s := range j.OpSteps[i] {
				op.Steps = append(op.Steps, Step{Name: s.Name, Epoch: s.Epoch})
			}
		}
		out.Ops = append(out.Ops, op)
	}
	return out
}

// tagObject is the object name of a tag opcode's target, as Op.Object.
func tagObject(kind, name string) string {
	if kind == "cluster" {
		return "cluster"
	}
	return kind + "/" + name
}
