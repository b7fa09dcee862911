package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
	"github.com/gnt-cluster/gnt/rpc/rpctest"
	"golang.org/x/crypto/bcrypt"
)

func writeCredentials(t *testing.T, home, text string, mode os.FileMode) {
	t.Helper()
	dir := filepath.Join(home, ".config", "gnt")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "credentials")
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestResolveCredentials(t *testing.T) {
	good := t.TempDir()
	writeCredentials(t, good, "# the admin\nadmin s3cret\n", 0o600)
	open := t.TempDir()
	writeCredentials(t, open, "admin s3cret\n", 0o644)
	three := t.TempDir()
	writeCredentials(t, three, "admin s3cret write\n", 0o600)
	two := t.TempDir()
	writeCredentials(t, two, "admin s3cret\nother x\n", 0o600)
	for _, c := range []struct {
		name string
		flag string
		env  map[string]string
		want credentials
		err  string
	}{
		{"nothing", "", map[string]string{"HOME": t.TempDir()}, credentials{}, ""},
		{"file", "", map[string]string{"HOME": good}, credentials{User: "admin", Password: "s3cret"}, ""},
		{"file readable by others", "", map[string]string{"HOME": open}, credentials{}, "is mode 0644: it holds a password and must be readable by its owner only"},
		{"file with three fields", "", map[string]string{"HOME": three}, credentials{}, "line 1: want USER PASSWORD, got 3 fields"},
		{"file with two users", "", map[string]string{"HOME": two}, credentials{}, "line 2: a second user"},
		{"environment", "", map[string]string{"HOME": good, "GNT_USER": "jack", "GNT_PASSWORD": "pw"}, credentials{User: "jack", Password: "pw"}, ""},
		{"user without password", "", map[string]string{"GNT_USER": "jack"}, credentials{}, "set $GNT_PASSWORD"},
		{"password without user", "", map[string]string{"GNT_PASSWORD": "pw"}, credentials{}, "without a user"},
		{"flag with the environment's password", "jack", map[string]string{"GNT_USER": "x", "GNT_PASSWORD": "pw"}, credentials{User: "jack", Password: "pw"}, ""},
		{"flag with the file's user", "admin", map[string]string{"HOME": good}, credentials{User: "admin", Password: "s3cret"}, ""},
		{"flag of another user asks", "jack", map[string]string{"HOME": good}, credentials{User: "jack", Prompt: true}, ""},
	} {
		got, err := resolveCredentials(c.flag, func(k string) string { return c.env[k] })
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v, %v; want an error with %q", c.name, got, err, c.err)
			}
		case err != nil || got != c.want:
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// TestRAPIUsersCommands runs gnt cluster rapi-users and the credentials
// against the real API with authentication enforced.
func TestRAPIUsersCommands(t *testing.T) {
	b := rpctest.NewCluster()
	if resp, _, err := b.ApplyCommand(fsm.RAPIUsersReplace{Now: 1, Users: []fsm.RAPIUser{
		{Name: "admin", Scheme: fsm.SchemeHA1, Hash: rpc.HA1("admin", "adm1n"), Write: true},
	}}); err != nil || resp.Err != nil {
		t.Fatal(err, resp.Err)
	}
	srv := httptest.NewServer(rpc.NewServer(b, rpc.ServerOptions{BcryptCost: bcrypt.MinCost}).Handler())
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	b.SetLeader(addr, "node1", true)

	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("j4ck\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(dir, "bad-users")
	if err := os.WriteFile(badFile, []byte("admin adm1n write\njack pw admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	goodFile := filepath.Join(dir, "users")
	if err := os.WriteFile(goodFile, []byte("# new list\nadmin {cleartext}adm1n write\nmonitor {HA1}"+rpc.HA1("monitor", "m")+" read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jackHome := t.TempDir()
	writeCredentials(t, jackHome, "jack j4ck\n", 0o600)

	admin := map[string]string{"GNT_USER": "admin", "GNT_PASSWORD": "adm1n", "HOME": t.TempDir()}
	jack := map[string]string{"HOME": jackHome}
	nobody := map[string]string{"HOME": t.TempDir()}
	for _, step := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{nobody, []string{"cluster", "info"}, 1, "GET /2/info needs read access"},
		{admin, []string{"cluster", "rapi-users", "add", "jack", "--password-file", pwFile}, 0, "Added user jack (read)"},
		{admin, []string{"cluster", "rapi-users", "add", "jack", "--password-file", pwFile}, 1, "exists already"},
		{admin, []string{"cluster", "rapi-users", "add", "jill"}, 1, "not a terminal"},
		{admin, []string{"cluster", "rapi-users", "list"}, 0, "User  Access\nadmin write\njack  read\n"},
		{jack, []string{"cluster", "info"}, 0, "Cluster name: cluster.example.com"},
		{jack, []string{"cluster", "add-tags", "x"}, 1, "user jack has read access; PUT /2/tags needs write access"},
		{jack, []string{"cluster", "rapi-users", "list"}, 1, "needs write access"},
		{admin, []string{"cluster", "rapi-users", "import", badFile}, 1, "bad-users: users file line 2: unknown option \"admin\" (options are read and write); no user was changed"},
		{jack, []string{"cluster", "info"}, 0, "Cluster name"},
		{admin, []string{"cluster", "modify", "--rapi-anonymous-read", "yes"}, 0, "rapi_anonymous_read -> True"},
		{nobody, []string{"cluster", "info"}, 0, "anonymous RAPI reads: True"},
		{nobody, []string{"cluster", "add-tags", "x"}, 1, "needs write access"},
		{admin, []string{"cluster", "rapi-users", "remove", "jack"}, 0, "Removed user jack"},
		{jack, []string{"cluster", "info"}, 1, "wrong user name or password"},
		{admin, []string{"cluster", "rapi-users", "import", goodFile}, 0, "Imported 2 users"},
		{admin, []string{"--json", "cluster", "rapi-users", "list"}, 0, `"name": "monitor"`},
		{admin, []string{"--user", "monitor", "cluster", "info"}, 1, "wrong user name or password"},
	} {
		r := gnt(t, step.env, append([]string{"--server", addr, "--timeout", "5s"}, step.args...)...)
		out := r.stdout + r.stderr
		if r.code != step.code || !strings.Contains(out, step.want) {
			t.Errorf("gnt %s: exit %d, want %d with %q\n%s", strings.Join(step.args, " "), r.code, step.code, step.want, out)
		}
	}
}
