package main

import "testing"

// TestConsoleSSHArgs: the ssh command of a kvm console, quoted for a
// shell where needed, as Ganeti builds it.
func TestConsoleSSHArgs(t *testing.T) {
	ci := consoleInfo{Instance: "vm1", Kind: "ssh", Host: "node1", User: "root", Port: 2222,
		Command: []string{"socat", "STDIO,raw,echo=0,escape=0x1d", "UNIX-CONNECT:/var/lib/gnt/agent/kvm/run/u 1/serial.sock"}}
	got := shellJoin(ci.sshArgs())
	want := `ssh -oEscapeChar=none -oBatchMode=yes -q -t -p 2222 root@node1 'socat STDIO,raw,echo=0,escape=0x1d '\''UNIX-CONNECT:/var/lib/gnt/agent/kvm/run/u 1/serial.sock'\'''`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	for in, want := range map[string]string{"": "''", "a b": "'a b'", "it's": `'it'\''s'`, "x=1,y": "x=1,y"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
