package server

import "testing"

// Raft's logger is set quieter than the server's. Setting its level once
// changed the level of the whole logger tree, so every Info line after
// Raft started ("leadership established", "lost leadership", ...) was
// dropped; the chaos suite found it looking for those lines.
func TestRaftLogLevelLeavesServerLogAlone(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.Bind, cfg.DataDir = "node1", "127.0.0.1", t.TempDir()
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.log.IsInfo() {
		t.Fatal("the server logs below Info with --log-level info")
	}
	rc := raftConfig(&s.cfg, s.log)
	if rc.Logger.IsInfo() {
		t.Error("Raft's logger logs Info; want Warn and above")
	}
	if !s.log.IsInfo() {
		t.Error("setting Raft's log level silenced the server's Info lines")
	}
}
