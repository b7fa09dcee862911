package server

import (
	"context"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/gnt-cluster/gnt/agent/osdef"
	"github.com/gnt-cluster/gnt/fsm"
	"github.com/gnt-cluster/gnt/rpc"
)

// The OS view: every node's agent reports the OS definitions of its
// search path (node RPC os-list); a gntd that serves the API (a master
// candidate) keeps the last report of each node, asked every
// osPollInterval and at once when the nodes change, so that GET /2/os and
// gnt os read it without calling any node. A creation that names nodes
// whose report is missing asks them then (rpc.OSSource), within
// osPollTimeout.

const (
	osPollInterval = 30 * time.Second
	osPollTimeout  = 5 * time.Second
)

// osViewState is the view.
type osViewState struct {
	mu    sync.Mutex
	nodes map[string]rpc.NodeOSView // by node UUID
}

// osConfig is this node's OS search path and how its scripts run. In
// the dev profile without a configured path, <data-dir>/os (holding the
// shipped gnt-image, installed at start) comes before the default path.
func (s *Server) osConfig() osdef.Config {
	path := s.cfg.OSSearchPath
	if len(path) == 0 && s.cfg.Profile == "dev" {
		path = append([]string{s.devOSDir()}, osdef.DefaultSearchPath...)
	}
	return osdef.Config{SearchPath: path, Owner: os.Geteuid()}
}

func (s *Server) devOSDir() string { return filepath.Join(s.cfg.DataDir, "os") }

// installDevOS puts gnt-image in <data-dir>/os in the dev profile.
func (s *Server) installDevOS() {
	if len(s.cfg.OSSearchPath) > 0 || s.cfg.Profile != "dev" {
		return
	}
	if err := osdef.InstallBuiltin(s.devOSDir(), ""); err != nil {
		s.log.Warn("could not install the shipped OS definition", "dir", s.devOSDir(), "error", err)
	}
}

// osReport converts the agent's report for the node RPC.
func osReport(r osdef.Report) rpc.NodeOSReport {
	out := rpc.NodeOSReport{SearchPath: r.SearchPath, OSes: make([]rpc.NodeOS, len(r.OSes)), Errors: r.Errors}
	for i, o := range r.OSes {
		ps := make([]rpc.NodeOSParam, len(o.Parameters))
		for j, p := range o.Parameters {
			ps[j] = rpc.NodeOSParam{Name: p.Name, Description: p.Description}
		}
		out.OSes[i] = rpc.NodeOS{Name: o.Name, Path: o.Path, Valid: o.Valid, Error: o.Error,
			APIVersions: o.APIVersions, Variants: o.Variants, Parameters: ps}
	}
	return out
}

// OSView implements rpc.OSSource.
func (s *Server) OSView(ctx context.Context, need []string) rpc.OSView {
	v := &s.osView
	v.mu.Lock()
	var missing []string
	for _, id := range need {
		if nv, ok := v.nodes[id]; !ok || nv.Report == nil {
			missing = append(missing, id)
		}
	}
	v.mu.Unlock()
	if len(missing) > 0 {
		var nodes []*fsm.Node
		s.fsm.Read(func(st *fsm.State, _ uint64) {
			for _, id := range missing {
				if n := st.Nodes[id]; n != nil && n.Addrs.Agent != "" {
					c := *n
					nodes = append(nodes, &c)
				}
			}
		})
		got := s.pollOS(ctx, nodes)
		v.mu.Lock()
		if v.nodes == nil {
			v.nodes = map[string]rpc.NodeOSView{}
		}
		for id, nv := range got {
			v.nodes[id] = nv
		}
		v.mu.Unlock()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := rpc.OSView{Nodes: make(map[string]rpc.NodeOSView, len(v.nodes))}
	for k, nv := range v.nodes {
		out.Nodes[k] = nv
	}
	return out
}

// pollOS asks nodes for their OS reports, at most runtimeConcurrency at
// a time, each within osPollTimeout.
func (s *Server) pollOS(ctx context.Context, nodes []*fsm.Node) map[string]rpc.NodeOSView {
	out := make(map[string]rpc.NodeOSView, len(nodes))
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, runtimeConcurrency)
	)
	for _, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func(n *fsm.Node) {
			defer func() { <-sem; wg.Done() }()
			nv := rpc.NodeOSView{}
			c, err := s.nodes.client(n)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, osPollTimeout)
				var rep rpc.NodeOSReport
				rep, err = c.OSList(cctx)
				cancel()
				if err == nil {
					nv.Report = &rep
				}
			}
			if err != nil {
				nv.Err = err.Error()
			}
			nv.At = time.Now()
			mu.Lock()
			out[n.UUID] = nv
			mu.Unlock()
		}(n)
	}
	wg.Wait()
	return out
}

// osLoop keeps the view while this gntd is a master candidate, until ctx
// ends.
func (s *Server) osLoop(ctx context.Context) {
	t := time.NewTicker(runtimeTick)
	defer t.Stop()
	var (
		lastPoll time.Time
		lastFP   uint64
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.raftNode() == nil {
			s.osView.mu.Lock()
			s.osView.nodes = nil
			s.osView.mu.Unlock()
			lastFP = 0
			continue
		}
		var nodes []*fsm.Node
		h := fnv.New64a()
		s.fsm.Read(func(st *fsm.State, _ uint64) {
			for _, n := range st.SortedNodes() {
				h.Write([]byte(n.UUID + "/" + n.Addrs.Agent + "/" + strconv.FormatBool(n.Offline) + ";"))
				if !n.Offline && n.Addrs.Agent != "" {
					c := *n
					nodes = append(nodes, &c)
				}
			}
		})
		fp := h.Sum64()
		if fp == lastFP && time.Since(lastPoll) < osPollInterval {
			continue
		}
		lastFP, lastPoll = fp, time.Now()
		got := s.pollOS(ctx, nodes)
		s.osView.mu.Lock()
		// A node that did not answer keeps its last report (with the
		// error): OS definitions do not vanish with a slow answer.
		for id, nv := range got {
			if old, ok := s.osView.nodes[id]; ok && nv.Report == nil && old.Report != nil {
				nv.Report = old.Report
			}
			got[id] = nv
		}
		s.osView.nodes = got // nodes removed or offline leave the view
		s.osView.mu.Unlock()
	}
}
