package fsm

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"
)

// BenchmarkApplyTagsSet measures the state machine alone: one
// configuration job (OP_TAGS_SET on a node of a 100-node cluster) per log
// entry, decoded and applied.
func BenchmarkApplyTagsSet(b *testing.B) {
	h := newHarness()
	h.initCluster("10.0.0.1")
	for i := 2; i <= 100; i++ {
		op := fmt.Sprintf(`{"OP_ID":"OP_NODE_ADD","node_name":"n%d","primary_ip":"10.0.%d.%d"}`, i, i/250, i%250+1)
		h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{h.uuid()}})
	}
	entries := make([][]byte, 1000)
	for i := range entries {
		op := fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"node","name":"n%d","tags":["bench:%d"]}`, i%100+1, i)
		entries[i], _ = Encode(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.index++
		if r := h.f.Apply(h.index, entries[i%len(entries)]).(Response); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkApplyBatch64 applies Batch entries of 64 configuration jobs, as
// the server's applier packs them under load.
func BenchmarkApplyBatch64(b *testing.B) {
	h := newHarness()
	h.initCluster("10.0.0.1")
	var subs [][]byte
	for i := 0; i < 64; i++ {
		op := fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"cluster","tags":["bench:%d"]}`, i)
		e, _ := Encode(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}})
		subs = append(subs, e)
	}
	entry, _ := EncodeBatch(subs)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.index++
		h.f.Apply(h.index, entry)
	}
	b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkSnapshotFullQueue snapshots the state with a full retained job
// history (MaxFinishedJobs, and MaxArchivedJobs archived summaries) and
// 100 nodes: the time per operation is the whole encoding, streamed as
// Persist streams it to the snapshot file (beside applies), µs-applies-held
// the part that holds applies (Raft's Snapshot call: the freeze).
func BenchmarkSnapshotFullQueue(b *testing.B) {
	h := newHarness()
	h.initCluster("10.0.0.1")
	for i := 2; i <= 100; i++ {
		op := fmt.Sprintf(`{"OP_ID":"OP_NODE_ADD","node_name":"n%d","primary_ip":"10.0.%d.%d"}`, i, i/250, i%250+1)
		h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{h.uuid()}})
	}
	for i := 0; i < MaxFinishedJobs+MaxArchivedJobs; i++ {
		op := fmt.Sprintf(`{"OP_ID":"OP_TAGS_SET","kind":"node","name":"n%d","tags":["t%d"],"reason":[["gnt:user","bench",1]]}`, i%100+1, i%8)
		h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(op)}, UUIDs: []string{""}})
	}
	b.ResetTimer()
	var size int
	var frozen time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		z := h.f.Freeze()
		frozen += time.Since(start)
		n, err := z.WriteTo(io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		size = int(n)
	}
	b.ReportMetric(float64(size)/1e6, "MB")
	b.ReportMetric(float64(frozen.Microseconds())/float64(b.N), "µs-applies-held")
}

// BenchmarkApplyInstancePut applies executor steps that store an instance
// record on a 1000-node, 20000-instance state (the allocator benchmarks'
// size), the path that keeps the instance indexes: rename changes no
// resources; grow adds memory, so the record is also checked against its
// node's free resources.
func BenchmarkApplyInstancePut(b *testing.B) {
	h := newHarness()
	h.initCluster("10.0.0.1")
	h.apply(LeaderEstablish{Now: h.now, Node: "n1"})
	st := h.f.st
	group := st.Nodes[st.Cluster.MasterNode].Group
	var nodes []string
	for i := 0; i < 1000; i++ {
		u := fmt.Sprintf("node-%04d", i)
		st.Nodes[u] = &Node{Name: fmt.Sprintf("n%04d.example.com", i), UUID: u, Group: group, VMCapable: true,
			Resources: Resources{MemoryMiB: 1 << 30, DiskMiB: 1 << 40, CPUs: 64}}
		nodes = append(nodes, u)
	}
	for i := 0; i < 20000; i++ {
		u := fmt.Sprintf("inst-%05d", i)
		in := &Instance{Name: fmt.Sprintf("i%05d.example.com", i), UUID: u, PrimaryNode: nodes[i%1000], SecondaryNodes: []string{},
			DiskTemplate: DTPlain, Disks: []Disk{{UUID: u + "-d0", SizeMiB: 10240, Mode: "rw"}}, MemoryMiB: 1024, VCPUs: 1, AdminState: AdminUp}
		if i%2 == 0 {
			in.DiskTemplate, in.SecondaryNodes = DTDrbd, []string{nodes[(i+7)%1000]}
		}
		st.Instances[u] = in
	}
	st.reindex()
	var job int64
	steps := 0
	newJob := func() {
		r := h.apply(JobSubmit{Now: h.now, Ops: []json.RawMessage{json.RawMessage(`{"OP_ID":"OP_TEST_DELAY","duration":0}`)}, UUIDs: []string{""}}).(Response)
		job, steps = r.JobID, 0
		h.apply(JobUpdate{Now: h.now, Epoch: 1, JobID: job, Action: ActionStart})
	}
	newJob()
	for _, kind := range []string{"rename", "grow"} {
		b.Run(kind, func(b *testing.B) {
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				in := h.f.st.Instances[fmt.Sprintf("inst-%05d", k%20000)].clone()
				expect := in.SerialNo
				if kind == "rename" {
					in.Name = fmt.Sprintf("r%d.example.com", k)
				} else {
					in.MemoryMiB++
				}
				c := StepChange{InstancePut: &InstancePut{Instance: *in, ExpectSerial: expect}}
				u := JobUpdate{Now: h.now, Epoch: 1, JobID: job, Action: ActionStep, Step: steps, StepName: "s", Changes: []StepChange{c}}
				if r := h.apply(u).(Response); r.Err != nil {
					b.Fatal(r.Err)
				}
				if steps++; steps == 100 {
					h.apply(JobUpdate{Now: h.now, Epoch: 1, JobID: job, Action: ActionFinish, Status: StatusSuccess})
					newJob()
				}
			}
		})
	}
}
