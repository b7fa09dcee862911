package chaos

import (
	"bufio"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maintd is the leader-only service with a port of its own: on the
// established leader, gntd serves maintd's HTTP API on <bind IP>:1816,
// bound once leadership is established and closed when it is lost; every
// answer says which leadership gave it (X-Gnt-Maintd-Epoch), and every
// gntd's status names the maintd it runs (rpc.Status.Maintd). During the
// run every member's 1816 is probed (run.go) and the checks below read the
// probes with the status samples and the members' logs.

// maintdPort is maintd's port (the harness's gntd run with the default).
const maintdPort = "1816"

const (
	// MaintdProbeTimeout bounds one probe; a probe that gets no answer
	// (refused, unreachable, timed out) counts as "no answer", never as a
	// violation.
	MaintdProbeTimeout = 300 * time.Millisecond
	// MaintdProbeEvery is the pause between two probes of one member.
	MaintdProbeEvery = 50 * time.Millisecond
	// MaintdCloseGrace is how long a member's maintd may still answer (or
	// its status still name a maintd) after its status said that it is no
	// longer the leader: the leadership monitor's reaction and the HTTP
	// server's shutdown.
	MaintdCloseGrace = 2 * time.Second
	// HandoverGrace is how long after a SIGCONT a paused, deposed leader's
	// maintd may still answer beside its successor's (see CheckMaintd).
	HandoverGrace = time.Second
	// MaintdAnswerWithin is how soon after healing (or after its
	// election, when later) the final leader's maintd must answer.
	MaintdAnswerWithin = 5 * time.Second
)

// MaintdProbe is one GET http://<member>:1816/ of the run.
type MaintdProbe struct {
	Member string `json:"member"`
	Start  int64  `json:"start"` // ns since the start of the run
	End    int64  `json:"end"`
	// Answered is set when an HTTP answer came, whatever its status (Code).
	Answered bool `json:"answered"`
	Code     int  `json:"code,omitempty"`
	// Epoch is the answer's X-Gnt-Maintd-Epoch; 0 when it was missing or
	// not a number (Header then holds what came).
	Epoch  uint64 `json:"epoch,omitempty"`
	Header string `json:"header,omitempty"`
	// Err says why no answer came (refused, timeout, ...).
	Err string `json:"err,omitempty"`
}

func (p MaintdProbe) window() string {
	return fmt.Sprintf("[%.3fs, %.3fs]", secs(p.Start), secs(p.End))
}

// Election is one leadership of a member as its log tells it: when Raft
// made it leader and when it established the leadership ("leadership
// established: epoch=E term=T took=D"), in ns since the start of the run
// (log times have millisecond precision). gntd logs Raft at WARN, so the
// election is the establishment less its took=, which runs from the start
// of the leader loop, woken by Raft's own observation that this member
// became leader; a Raft "entering leader state" line (INFO) is used
// instead when the log has one.
type Election struct {
	Member      string `json:"member"`
	Epoch       uint64 `json:"epoch"`
	Term        uint64 `json:"term"`
	Elected     int64  `json:"elected"`
	Established int64  `json:"established"`
}

var (
	logTime      = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\S+) \[`)
	enteringLine = regexp.MustCompile(`raft: entering leader state`)
	tookField    = regexp.MustCompile(` took=(\S+)`)
)

// logTimeLayouts are hclog's time format and RFC 3339.
var logTimeLayouts = []string{"2006-01-02T15:04:05.000Z0700", time.RFC3339Nano}

// ParseElections finds a member's leaderships in its log, the restarts of
// its process included; start is the start of the run (times before it
// are negative).
func ParseElections(member, log string, start time.Time) []Election {
	var out []Election
	elected, have := int64(0), false
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var at time.Time
		var err error
		for _, layout := range logTimeLayouts {
			if at, err = time.Parse(layout, m[1]); err == nil {
				break
			}
		}
		if err != nil {
			continue
		}
		ns := int64(at.Sub(start))
		if enteringLine.MatchString(line) {
			elected, have = ns, true
			continue
		}
		if e := establishedLine.FindStringSubmatch(line); e != nil {
			epoch, _ := strconv.ParseUint(e[1], 10, 64)
			term, _ := strconv.ParseUint(e[2], 10, 64)
			el := Election{Member: member, Epoch: epoch, Term: term, Elected: ns, Established: ns}
			if t := tookField.FindStringSubmatch(line); t != nil {
				if d, err := time.ParseDuration(t[1]); err == nil {
					el.Elected = ns - int64(d)
				}
			}
			if have {
				el.Elected = elected
			}
			out = append(out, el)
			have = false
		}
	}
	return out
}

// MaintdHistory is what the maintd checks read.
type MaintdHistory struct {
	Probes  []MaintdProbe
	Samples []Sample
	// Elections are the members' leaderships from their logs.
	Elections []Election
	// Candidates name the members that run Raft; maintd answering anywhere
	// else is wrong at once.
	Candidates []string
	// Faults give the pauses (see HandoverGrace).
	Faults []Fault
}

// MaintdResult is what CheckMaintd found.
type MaintdResult struct {
	Violations []string
	// Answers is the number of probes answered, Epochs the number of
	// distinct epochs among them.
	Answers, Epochs int
	// Handovers counts the answers of a deposed leader's maintd beside or
	// after its successor's that came within HandoverGrace of the deposed
	// leader's SIGCONT (allowed, see CheckMaintd); HandoverLate is the
	// longest such an answer came after the SIGCONT, and Handover
	// describes each.
	Handovers    int
	HandoverLate time.Duration
	Handover     []string
	// LateClose is the longest a member's maintd answered after its status
	// said that it was no longer the leader (within MaintdCloseGrace, or
	// it is a violation).
	LateClose time.Duration
	// AfterElection is, for each leadership elected while its member was
	// probed and whose maintd answered, how long after the election the
	// first answer came (in the order of the elections).
	AfterElection []time.Duration
}

// CheckMaintd checks that port 1816 answers only on the leader:
//
//   - (a) one epoch, one member: an epoch answers (or is named by a
//     status) on one member only, the member whose log established it; an
//     answer always carries its epoch; no two members run maintd in one
//     term (status samples of leaders); maintd never answers on a plain
//     node.
//   - (b) one leadership at a time: once an epoch has answered, no older
//     epoch answers in a probe that began before, overlapped or came after
//     (two epochs never answer in overlapping probe windows, and a deposed
//     maintd never answers after its successor did). The one allowance is
//     the handover of a paused leader: a process stopped by SIGSTOP cannot
//     learn that it was deposed, so for HandoverGrace after its SIGCONT
//     its maintd may answer until its Raft steps down; (c) still bounds
//     that by its own status. Partitions get no allowance: a leader cut
//     off from the majority steps down when its lease (100 ms) runs out,
//     before the others' election timer (200–400 ms) lets a successor in.
//   - (c) closed on step-down: once a member's status says it is not the
//     leader (and it has not been seen leader since), its maintd of the
//     leadership it lost answers no more after MaintdCloseGrace, and its
//     status no longer names one.
//
// A probe that got no answer never counts against anyone: a member cut
// off, paused or down does not answer.
func CheckMaintd(in MaintdHistory) MaintdResult {
	var res MaintdResult
	var answers []MaintdProbe
	for _, p := range in.Probes {
		if p.Answered {
			answers = append(answers, p)
		}
	}
	sort.SliceStable(answers, func(i, j int) bool { return answers[i].Start < answers[j].Start })
	res.Answers = len(answers)
	v := &violations{}

	// (a) one epoch, one member.
	candidate := map[string]bool{}
	for _, c := range in.Candidates {
		candidate[c] = true
	}
	type seen struct{ first, last int64 }
	byEpoch := map[uint64]map[string]*seen{}
	note := func(e uint64, m string, at int64) {
		if byEpoch[e] == nil {
			byEpoch[e] = map[string]*seen{}
		}
		s := byEpoch[e][m]
		if s == nil {
			byEpoch[e][m] = &seen{first: at, last: at}
			return
		}
		s.first, s.last = min(s.first, at), max(s.last, at)
	}
	for _, p := range answers {
		if len(in.Candidates) > 0 && !candidate[p.Member] {
			v.add("maintd-node:"+p.Member, "maintd answered on %s %s, which is not a candidate", p.Member, p.window())
		}
		if p.Epoch == 0 {
			v.add("noepoch:"+p.Member, "maintd on %s answered %s without a valid X-Gnt-Maintd-Epoch (%q)", p.Member, p.window(), p.Header)
			continue
		}
		note(p.Epoch, p.Member, p.End)
	}
	byTerm := map[uint64]map[string]bool{}
	for _, s := range in.Samples {
		if s.MaintdEpoch == 0 {
			continue
		}
		note(s.MaintdEpoch, s.Member, s.At)
		// A deposed leader may name its closing maintd while a follower
		// of the next term; (c) bounds that.
		if s.Term > 0 && s.State == "leader" {
			if byTerm[s.Term] == nil {
				byTerm[s.Term] = map[string]bool{}
			}
			byTerm[s.Term][s.Member] = true
		}
	}
	establishedBy := map[uint64][]Election{}
	for _, e := range in.Elections {
		establishedBy[e.Epoch] = append(establishedBy[e.Epoch], e)
	}
	epochs := sortedTerms(byEpoch)
	res.Epochs = 0
	for _, e := range epochs {
		members := byEpoch[e]
		for _, p := range answers {
			if p.Epoch == e {
				res.Epochs++
				break
			}
		}
		if len(members) > 1 {
			var where []string
			for _, m := range sortedKeys(members) {
				where = append(where, fmt.Sprintf("%s (%.3fs–%.3fs)", m, secs(members[m].first), secs(members[m].last)))
			}
			v.add(fmt.Sprintf("epoch-members:%d", e), "maintd epoch %d seen on %d members: %s", e, len(members), strings.Join(where, ", "))
		}
		if len(in.Elections) == 0 {
			continue
		}
		ests := establishedBy[e]
		if len(ests) == 0 {
			v.add(fmt.Sprintf("epoch-unknown:%d", e), "maintd epoch %d seen on %s, but no member's log established it", e, strings.Join(sortedKeys(members), ", "))
			continue
		}
		for _, m := range sortedKeys(members) {
			if ests[0].Member != m {
				v.add(fmt.Sprintf("epoch-owner:%d:%s", e, m), "maintd epoch %d seen on %s, but %s established it", e, m, ests[0].Member)
			}
		}
	}
	for _, term := range sortedTerms(byTerm) {
		if len(byTerm[term]) > 1 {
			v.add(fmt.Sprintf("term:%d", term), "maintd running on several members in term %d (status): %s", term, strings.Join(sortedKeys(byTerm[term]), ", "))
		}
	}

	// (b) one leadership at a time. newest[i] is the answer with the
	// highest epoch among answers[:i+1] (ordered by start).
	newest := make([]int, len(answers))
	for i := range answers {
		newest[i] = i
		if i > 0 && answers[newest[i-1]].Epoch >= answers[i].Epoch {
			newest[i] = newest[i-1]
		}
	}
	resumes := map[string][]int64{}
	for _, f := range in.Faults {
		if f.Kind == PauseLeader {
			// The SIGCONT went out when the heal began; End is taken
			// after it, and the resumed process may answer in between.
			at := f.End
			if f.Healing > 0 {
				at = f.Healing
			}
			for _, m := range f.Targets {
				resumes[m] = append(resumes[m], at)
			}
		}
	}
	for _, p := range answers {
		if p.Epoch == 0 {
			continue
		}
		// The answers that began no later than p ended.
		k := sort.Search(len(answers), func(i int) bool { return answers[i].Start > p.End }) - 1
		if k < 0 {
			continue
		}
		q := answers[newest[k]]
		if q.Epoch <= p.Epoch {
			continue
		}
		if r, ok := resumedNear(resumes[p.Member], p); ok {
			res.Handovers++
			res.HandoverLate = max(res.HandoverLate, time.Duration(p.End-r))
			res.Handover = append(res.Handover, fmt.Sprintf("%s's maintd of epoch %d answered %s, %v after its SIGCONT at %.3fs, beside epoch %d on %s %s",
				p.Member, p.Epoch, p.window(), time.Duration(p.End-r).Round(time.Millisecond), secs(r), q.Epoch, q.Member, q.window()))
			continue
		}
		how := "after"
		if q.End >= p.Start {
			how = "in a probe window overlapping that of"
		}
		v.add(fmt.Sprintf("order:%d:%s:%d", p.Epoch, p.Member, q.Epoch),
			"maintd of epoch %d answered on %s %s %s epoch %d on %s %s: a deposed leadership's maintd beside its successor's",
			p.Epoch, p.Member, p.window(), how, q.Epoch, q.Member, q.window())
	}

	// (c) closed on step-down.
	byMember := map[string][]Sample{}
	for _, s := range in.Samples {
		byMember[s.Member] = append(byMember[s.Member], s)
	}
	for _, ss := range byMember {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].At < ss[j].At })
	}
	// est is a bound after which epoch e surely existed on member m: its
	// establishment in the log (log times are truncated to the
	// millisecond), or the first answer or status that showed it.
	est := map[string]map[uint64]int64{}
	bound := func(m string, e uint64, at int64) {
		if est[m] == nil {
			est[m] = map[uint64]int64{}
		}
		if old, ok := est[m][e]; !ok || at < old {
			est[m][e] = at
		}
	}
	for _, e := range in.Elections {
		bound(e.Member, e.Epoch, e.Established+int64(time.Millisecond))
	}
	for _, p := range answers {
		bound(p.Member, p.Epoch, p.End)
	}
	for _, s := range in.Samples {
		if s.MaintdEpoch != 0 {
			bound(s.Member, s.MaintdEpoch, s.At)
		}
	}
	// stepDown returns the first sample of the streak of "not leader"
	// samples of m that ends with the last sample before t, taken after
	// epoch e existed; ok is false when m was last seen leader, or no such
	// sample exists.
	stepDown := func(m string, e uint64, t int64) (Sample, bool) {
		ss := byMember[m]
		i := sort.Search(len(ss), func(i int) bool { return ss[i].At > t }) - 1
		if i < 0 || ss[i].State == "leader" {
			return Sample{}, false
		}
		after, ok := est[m][e]
		if !ok {
			return Sample{}, false
		}
		var first Sample
		found := false
		for ; i >= 0 && ss[i].State != "leader" && ss[i].Call >= after; i-- {
			first, found = ss[i], true
		}
		return first, found
	}
	for _, p := range answers {
		if p.Epoch == 0 {
			continue
		}
		s, ok := stepDown(p.Member, p.Epoch, p.Start)
		if !ok {
			continue
		}
		late := time.Duration(p.End - s.Call)
		if time.Duration(p.Start-s.At) > MaintdCloseGrace {
			v.add(fmt.Sprintf("late:%d:%s", p.Epoch, p.Member),
				"maintd of epoch %d still answered on %s %s, %v after its status said %s in term %d (sampled [%.3fs, %.3fs]); it must close within %v of losing leadership",
				p.Epoch, p.Member, p.window(), time.Duration(p.Start-s.At).Round(time.Millisecond), s.State, s.Term, secs(s.Call), secs(s.At), MaintdCloseGrace)
		} else if late > res.LateClose {
			res.LateClose = late
		}
	}
	for _, s := range in.Samples {
		if s.MaintdEpoch == 0 || s.State == "leader" {
			continue
		}
		d, ok := stepDown(s.Member, s.MaintdEpoch, s.Call)
		if ok && time.Duration(s.Call-d.At) > MaintdCloseGrace {
			v.add(fmt.Sprintf("late-status:%d:%s", s.MaintdEpoch, s.Member),
				"the status of %s named maintd epoch %d at %.3fs, %v after it said %s in term %d",
				s.Member, s.MaintdEpoch, secs(s.Call), time.Duration(s.Call-d.At).Round(time.Millisecond), d.State, d.Term)
		}
	}
	// How soon after each election maintd answered.
	probed := map[string]int64{}
	for _, p := range in.Probes {
		if s, ok := probed[p.Member]; !ok || p.Start < s {
			probed[p.Member] = p.Start
		}
	}
	elections := slices.Clone(in.Elections)
	sort.SliceStable(elections, func(i, j int) bool { return elections[i].Elected < elections[j].Elected })
	for _, e := range elections {
		if s, ok := probed[e.Member]; !ok || e.Elected < s {
			continue
		}
		for _, p := range answers { // by start
			if p.Member == e.Member && p.Epoch == e.Epoch {
				res.AfterElection = append(res.AfterElection, time.Duration(p.End-e.Elected))
				break
			}
		}
	}
	res.Violations = v.list()
	return res
}

// resumedNear returns the SIGCONT (fault end) of the member that falls
// within HandoverGrace before the probe began, or during it, if any.
func resumedNear(resumes []int64, p MaintdProbe) (int64, bool) {
	for _, r := range resumes {
		if r <= p.End && p.Start <= r+int64(HandoverGrace) {
			return r, true
		}
	}
	return 0, false
}

// violations collects messages, one per key, counting repeats.
type violations struct {
	keys  []string
	first map[string]string
	count map[string]int
}

func (v *violations) add(key, format string, args ...any) {
	if v.first == nil {
		v.first, v.count = map[string]string{}, map[string]int{}
	}
	if _, ok := v.first[key]; !ok {
		v.keys = append(v.keys, key)
		v.first[key] = fmt.Sprintf(format, args...)
	}
	v.count[key]++
}

func (v *violations) list() []string {
	var out []string
	for _, k := range v.keys {
		msg := v.first[k]
		if n := v.count[k]; n > 1 {
			msg += fmt.Sprintf(" (and %d more such)", n-1)
		}
		out = append(out, msg)
	}
	return out
}

// FinalMaintd is the final leader's maintd after healing.
type FinalMaintd struct {
	Leader string
	Epoch  uint64
	// Elected is when Raft made the leader leader (its log); Healed when
	// the run's faults were all healed.
	Elected, Healed int64
}

// CheckFinalMaintd finds the final leader's first maintd answer with the
// final epoch, and returns how long after the election it came. It is a
// violation when none came within MaintdAnswerWithin of healing (or of the
// election, when later).
func CheckFinalMaintd(probes []MaintdProbe, f FinalMaintd) (time.Duration, []string) {
	first := int64(-1)
	for _, p := range probes {
		if p.Answered && p.Member == f.Leader && p.Epoch == f.Epoch && (first < 0 || p.End < first) {
			first = p.End
		}
	}
	from := max(f.Healed, f.Elected)
	if first < 0 {
		return 0, []string{fmt.Sprintf("the final leader %s (epoch %d, elected at %.3fs) never answered on port %s", f.Leader, f.Epoch, secs(f.Elected), maintdPort)}
	}
	after := time.Duration(first - f.Elected)
	if d := time.Duration(first - from); d > MaintdAnswerWithin {
		return after, []string{fmt.Sprintf("the final leader %s (epoch %d) first answered on port %s at %.3fs, %v after %s, later than %v",
			f.Leader, f.Epoch, maintdPort, secs(first), d.Round(time.Millisecond), map[bool]string{true: "healing", false: "its election"}[f.Healed >= f.Elected], MaintdAnswerWithin)}
	}
	return after, nil
}
