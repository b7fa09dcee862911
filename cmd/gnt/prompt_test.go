package main

import (
	"strings"
	"testing"
)

// TestConfirmations: the commands Ganeti asks about ask Ganeti's question,
// act only on "y", refuse without a terminal (saying to use --force), and
// -f/--force skips the question.
func TestConfirmations(t *testing.T) {
	writes := func(f *fakeAPI) []request {
		var out []request
		for _, r := range f.requests() {
			if r.Method != "GET" {
				out = append(out, r)
			}
		}
		return out
	}
	for _, tc := range []struct {
		args     []string
		what     string
		question string
		request  string
	}{
		{[]string{"instance", "remove", "web1"}, "remove instance web1",
			"This will remove the volumes of the instance web1 (including mirrors), thus removing all the data of the instance. Continue? y/[n]/?: ",
			"DELETE /2/instances/web1"},
		{[]string{"instance", "failover", "web1"}, "fail over instance web1",
			"Failover will happen to image web1. This requires a shutdown of the instance. Continue? y/[n]/?: ", "PUT /2/instances/web1/failover {}"},
		{[]string{"instance", "migrate", "web1", "--cleanup"}, "migrate instance web1",
			"Instance web1 will be migrated. Note that migration might impact the instance if anything goes wrong (e.g. due to bugs in the hypervisor). Continue? y/[n]/?: ",
			`PUT /2/instances/web1/migrate {"cleanup":true}`},
		{[]string{"node", "evacuate", "n1"}, "evacuate node n1", "Relocate instance(s) web1, web2 from node(s) n1? y/[n]/?: ",
			`POST /2/nodes/n1/evacuate {"mode":"all"}`},
		{[]string{"node", "evacuate", "n1", "-p"}, "evacuate node n1", "Relocate instance(s) web1 from node(s) n1? y/[n]/?: ",
			`POST /2/nodes/n1/evacuate {"mode":"primary-only"}`},
		{[]string{"instance", "reinstall", "web1"}, "reinstall instance web1",
			"This will reinstall the instance 'web1' (and keep the same OS) which removes all data. Continue? y/[n]/?: ",
			`POST /2/instances/web1/reinstall {"start":true}`},
		{[]string{"instance", "reinstall", "web1", "--os-type", "noop", "--no-startup"}, "reinstall instance web1",
			"This will reinstall the instance 'web1' (and change the OS to 'noop') which removes all data. Continue? y/[n]/?: ",
			`POST /2/instances/web1/reinstall {"os":"noop","start":false}`},
		{[]string{"node", "remove", "n1"}, "remove node n1", "This will remove node n1 from the cluster. Continue? y/[n]/?: ",
			"DELETE /2/nodes/n1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			setup := func() *fakeAPI {
				f := newFake(t)
				f.on("GET", "/2/nodes/n1", 200, `{"name": "n1", "pinst_list": ["web1"], "sinst_list": ["web2"]}`)
				return f
			}
			run := func(f *fakeAPI, stdin string, terminal bool, extra ...string) result {
				return gntIn(t, stdin, terminal, append(append([]string{"--server", f.addr()}, tc.args...), extra...)...)
			}
			f := setup()
			r := run(f, "y\n", false)
			if want := "Failure: refusing to " + tc.what + " without confirmation: stdin is not a terminal (use --force)\n"; r.code != 1 || r.stderr != want || len(writes(f)) != 0 {
				t.Errorf("no terminal: exit %d stderr %q, want %q; writes %v", r.code, r.stderr, want, writes(f))
			}
			for _, answer := range []string{"n\n", "\n", "", "?\nno\n"} {
				f = setup()
				r = run(f, answer, true)
				if r.code != 1 || !strings.HasPrefix(r.stdout, tc.question) || r.stderr != "Failure: aborted\n" || len(writes(f)) != 0 {
					t.Errorf("answer %q: exit %d stdout %q stderr %q; writes %v", answer, r.code, r.stdout, r.stderr, writes(f))
				}
				if answer == "?\nno\n" && !strings.Contains(r.stdout, "y - Perform the operation\nn - Do not perform the operation\n") {
					t.Errorf("answer ?: no help in %q", r.stdout)
				}
			}
			f = setup()
			r = run(f, "maybe\ny\n", true)
			if ws := writes(f); r.code != 0 || strings.Count(r.stdout, tc.question) != 2 || len(ws) != 1 || ws[0].String() != tc.request {
				t.Errorf("answer yes: exit %d stdout %q stderr %q; writes %v, want %s", r.code, r.stdout, r.stderr, ws, tc.request)
			}
			for _, force := range []string{"-f", "--force"} {
				f = setup()
				r = run(f, "", false, force)
				if ws := writes(f); r.code != 0 || strings.Contains(r.stdout, "y/[n]/?") || len(ws) != 1 || ws[0].String() != tc.request {
					t.Errorf("%s: exit %d stdout %q stderr %q; writes %v", force, r.code, r.stdout, r.stderr, ws)
				}
			}
		})
	}
}
