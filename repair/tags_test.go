package repair

import (
	"reflect"
	"strings"
	"testing"
)

const pfx = AutorepairPrefix

func TestParseTagGood(t *testing.T) {
	for _, c := range []struct {
		tag  string
		want Tag
		// canon is the formatted form when it differs from tag.
		canon string
	}{
		{pfx + "fix-storage", Tag{Kind: TagEnable, Type: TypeFixStorage}, ""},
		{pfx + "migrate", Tag{Kind: TagEnable, Type: TypeMigrate}, ""},
		{pfx + "failover", Tag{Kind: TagEnable, Type: TypeFailover}, ""},
		{pfx + "reinstall", Tag{Kind: TagEnable, Type: TypeReinstall}, ""},
		{pfx + "suspend", Tag{Kind: TagSuspend, Forever: true}, ""},
		{pfx + "suspend:", Tag{Kind: TagSuspend, Forever: true}, pfx + "suspend"},
		{pfx + "suspend:1700000000", Tag{Kind: TagSuspend, Until: 1700000000}, ""},
		{pfx + "suspend:0", Tag{Kind: TagSuspend}, ""},
		{pfx + "suspend:007", Tag{Kind: TagSuspend, Until: 7}, pfx + "suspend:7"},
		{pfx + "pending:failover:u-1:1700000000:", Tag{Kind: TagPending, Type: TypeFailover, ID: "u-1", Time: 1700000000}, ""},
		{pfx + "pending:reinstall:u-1:5:12", Tag{Kind: TagPending, Type: TypeReinstall, ID: "u-1", Time: 5, Jobs: []int64{12}}, ""},
		{pfx + "pending:fix-storage:u:5:12+13+14", Tag{Kind: TagPending, Type: TypeFixStorage, ID: "u", Time: 5, Jobs: []int64{12, 13, 14}}, ""},
		{pfx + "result:failover:u:5:success:3+4", Tag{Kind: TagResult, Type: TypeFailover, ID: "u", Time: 5, Result: ResultSuccess, Jobs: []int64{3, 4}}, ""},
		{pfx + "result:reinstall:u:5:enoperm:", Tag{Kind: TagResult, Type: TypeReinstall, ID: "u", Time: 5, Result: ResultEnoperm}, ""},
		{pfx + "result:migrate:u:5:failure:9", Tag{Kind: TagResult, Type: TypeMigrate, ID: "u", Time: 5, Result: ResultFailure, Jobs: []int64{9}}, ""},
	} {
		got, ok, err := ParseTag(c.tag)
		if !ok || err != nil {
			t.Errorf("%s: ok=%v err=%v", c.tag, ok, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.tag, got, c.want)
		}
		canon := c.canon
		if canon == "" {
			canon = c.tag
		}
		if s := got.String(); s != canon {
			t.Errorf("%s: formats as %s, want %s", c.tag, s, canon)
		}
	}
}

func TestParseTagBad(t *testing.T) {
	for _, c := range []struct {
		tag, msg string
	}{
		{pfx, "unknown autorepair type"},
		{pfx + "evacuate", "unknown autorepair type"},
		{pfx + "Failover", "unknown autorepair type"},
		{pfx + "suspend:x", "bad suspension end"},
		{pfx + "suspend:-5", "bad suspension end"},
		{pfx + "suspend:+5", "bad suspension end"},
		{pfx + "suspend:5:6", "bad suspension end"},
		{pfx + "suspend:99999999999999999999", "bad suspension end"},
		{pfx + "pending:failover:u:5", "4 fields"},
		{pfx + "pending:failover:u:5:1:2", "4 fields"},
		{pfx + "pending:evacuate:u:5:", "unknown autorepair type"},
		{pfx + "pending:failover::5:", "empty repair id"},
		{pfx + "pending:failover:u:yesterday:", "bad timestamp"},
		{pfx + "pending:failover:u:-1:", "bad timestamp"},
		{pfx + "pending:failover:u:5:1++2", `bad job id ""`},
		{pfx + "pending:failover:u:5:+", `bad job id ""`},
		{pfx + "pending:failover:u:5:0", `bad job id "0"`},
		{pfx + "pending:failover:u:5:x", `bad job id "x"`},
		{pfx + "pending:failover:u:5:-3", `bad job id "-3"`},
		{pfx + "result:failover:u:5:success", "5 fields"},
		{pfx + "result:failover:u:5:done:", "unknown result"},
		{pfx + "result:failover:u:5:Success:", "unknown result"},
		{pfx + "result:failover:u:5:success:1:2", "5 fields"},
		{pfx + "result:reboot:u:5:success:", "unknown autorepair type"},
		{pfx + "result:failover:u:5.5:success:", "bad timestamp"},
	} {
		_, ok, err := ParseTag(c.tag)
		if !ok {
			t.Errorf("%s: not recognised as an autorepair tag", c.tag)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one containing %q", c.tag, err, c.msg)
		}
	}
	for _, tag := range []string{"", "web", "ganeti:watcher:autorepai", "ganeti:watcher:autorepair", "maintd:repairready:x"} {
		if _, ok, err := ParseTag(tag); ok || err != nil {
			t.Errorf("%q: ok=%v err=%v, want not an autorepair tag", tag, ok, err)
		}
	}
}

// FuzzParseTag: no tag may panic the parser, and a tag it accepts formats
// to one that parses back to the same value.
func FuzzParseTag(f *testing.F) {
	f.Add(pfx + "failover")
	f.Add(pfx + "suspend:1700000000")
	f.Add(pfx + "pending:reinstall:u-1:5:12+13")
	f.Add(pfx + "result:fix-storage:u:5:enoperm:")
	f.Fuzz(func(t *testing.T, tag string) {
		p, ok, err := ParseTag(tag)
		if !ok || err != nil {
			return
		}
		s := p.String()
		q, ok, err := ParseTag(s)
		if !ok || err != nil {
			t.Fatalf("%q formats as %q, which does not parse: %v", tag, s, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("%q: parsed %+v, formatted %q, parsed again %+v", tag, p, s, q)
		}
		if s2 := q.String(); s2 != s {
			t.Fatalf("%q: formatting is not stable: %q then %q", tag, s, s2)
		}
	})
}
