package repair

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gnt-cluster/gnt/fsm"
)

// bigScenario is the benchmark's state: 1000 nodes, 20000 instances (half
// drbd, 40% plain, 10% diskless), autorepair tags on the cluster and on a
// tenth of the instances, 20 nodes offline, 20 dead past the grace period
// (with an OOB helper), 10 drained, 50 incidents (self-diagnose results of
// 50 nodes asking for live-repair or evacuation) and 200 finished jobs.
func bigScenario(b *testing.B) (*scenario, map[string]Observation) {
	var in strings.Builder
	in.WriteString("cluster tags=ganeti:watcher:autorepair:failover oob=/usr/bin/oob\n")
	const nodes, insts = 1000, 20000
	for i := 0; i < nodes; i++ {
		fmt.Fprintf(&in, "node node%04d", i)
		switch {
		case i%50 == 7:
			in.WriteString(" offline")
		case i%50 == 13:
			in.WriteString(" dead=0")
		case i%100 == 21:
			in.WriteString(" drained")
		}
		in.WriteString("\n")
	}
	for i := 0; i < insts; i++ {
		p, s := i%nodes, (i*7+1)%nodes
		if s == p {
			s = (p + 1) % nodes
		}
		tags := ""
		if i%10 == 4 {
			tags = " tags=ganeti:watcher:autorepair:reinstall"
		}
		switch i % 10 {
		case 0, 1, 2, 3, 4:
			fmt.Fprintf(&in, "instance inst%05d drbd node%04d node%04d%s\n", i, p, s, tags)
		case 9:
			fmt.Fprintf(&in, "instance inst%05d diskless node%04d%s\n", i, p, tags)
		default:
			fmt.Fprintf(&in, "instance inst%05d plain node%04d%s\n", i, p, tags)
		}
	}
	for j := 1; j <= 200; j++ {
		fmt.Fprintf(&in, "job %d success\n", j)
	}
	sc := &scenario{}
	sc.build(b, in.String())
	obs := map[string]Observation{}
	for k := 0; k < 50; k++ {
		name := fmt.Sprintf("node%04d", 100+k*17)
		status := fsm.ActionLiveRepair
		if k%2 == 0 {
			status = fsm.ActionEvacuate
		}
		js := fmt.Sprintf(`{"command":"fix-%d","details":{"slot":%d},"status":%q}`, k, k, status)
		obs[name] = Observation{Node: name, Status: status, Command: fmt.Sprintf("fix-%d", k), Original: []byte(js)}
	}
	return sc, obs
}

// BenchmarkPlanRound plans one maintd round, harep included, on the big
// state: the target is under 50 ms.
func BenchmarkPlanRound(b *testing.B) {
	sc, obs := bigScenario(b)
	now := at(3600)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sc.f.Read(func(st *fsm.State, _ uint64) {
			p := PlanRound(RoundInput{State: st, Now: now, Diagnose: obs})
			if len(p.Command.Incidents) == 0 {
				b.Fatal("no incidents planned")
			}
		})
	}
	b.StopTimer()
	if b.N > 0 {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/round")
	}
}

// BenchmarkServiceIdleTick is one tick of the leader's maintd on the big
// state when nothing changed since the last plan: "replan" plans anyway
// (every tick did before planning was skipped on unchanged inputs),
// "unchanged" is the tick now. The idle leader's maintd CPU is the tick's
// cost times the ticks per second (2 with the LAN timing's 0.5 s).
func BenchmarkServiceIdleTick(b *testing.B) {
	sc, obs := bigScenario(b)
	sc.f.Read(func(_ *fsm.State, index uint64) { sc.idx = max(sc.idx, index) })
	now := at(3600)
	svc := &Service{FSM: sc.f, Apply: fsmApplier{sc}, Epoch: 1, Clock: func() time.Time { return now },
		Diagnose: func() map[string]Observation { return obs }}
	// Settle: the first ticks record the round and its jobs.
	for k := 0; k < 10; k++ {
		if err := svc.step(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"replan", "unchanged"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if mode == "replan" {
					svc.replanNext()
				}
				if err := svc.step(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/tick")
		})
	}
}
