package transport

import (
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/memberlist"
)

// memberTable reads memberlist's own member table under memberlist's own
// lock.
//
// Why this exists: memberlist (v0.6.0) offers no race-free way to learn a
// member's state. Members() returns pointers into its table, which it
// rewrites in place under its lock (hashicorp/memberlist#306, #250), so
// reading them afterwards is a data race; and the exported Node.State field
// is never written at all (the state lives in the unexported nodeState that
// embeds Node), so the state handed to EventDelegate and returned by
// Members() is always StateAlive. Suspect members, and dead versus left,
// are therefore invisible through the API. The only consistent view is the
// table itself, read while holding nodeLock.
//
// newMemberTable checks the layout it relies on (field names and types) and
// fails if a memberlist upgrade changed it; TestGossipTableLayout keeps that
// honest. The reader takes only the read lock, copies what it needs and
// calls nothing of memberlist's while holding it.
type memberTable struct {
	lock    *sync.RWMutex
	nodeMap reflect.Value // map[string]*nodeState, writable view

	stateOff  uintptr // offset of nodeState.State
	changeOff uintptr // offset of nodeState.StateChange
}

func newMemberTable(ml *memberlist.Memberlist) (*memberTable, error) {
	v := reflect.ValueOf(ml).Elem()
	lockField := v.FieldByName("nodeLock")
	if !lockField.IsValid() || lockField.Type() != reflect.TypeFor[sync.RWMutex]() {
		return nil, layoutError("Memberlist.nodeLock is not a sync.RWMutex")
	}
	mapField := v.FieldByName("nodeMap")
	if !mapField.IsValid() || mapField.Kind() != reflect.Map || mapField.Type().Key().Kind() != reflect.String {
		return nil, layoutError("Memberlist.nodeMap is not a map by name")
	}
	ptr := mapField.Type().Elem()
	if ptr.Kind() != reflect.Pointer || ptr.Elem().Kind() != reflect.Struct {
		return nil, layoutError("Memberlist.nodeMap does not hold struct pointers")
	}
	st := ptr.Elem()
	node, ok := st.FieldByName("Node")
	if !ok || node.Type != reflect.TypeFor[memberlist.Node]() || node.Offset != 0 || !node.Anonymous {
		return nil, layoutError("nodeState does not embed Node first")
	}
	state, ok := st.FieldByName("State")
	if !ok || state.Type != reflect.TypeFor[memberlist.NodeStateType]() || len(state.Index) != 1 {
		return nil, layoutError("nodeState.State is not a NodeStateType")
	}
	change, ok := st.FieldByName("StateChange")
	if !ok || change.Type != reflect.TypeFor[time.Time]() {
		return nil, layoutError("nodeState.StateChange is not a time.Time")
	}
	return &memberTable{
		lock:      (*sync.RWMutex)(unsafe.Pointer(lockField.UnsafeAddr())),
		nodeMap:   reflect.NewAt(mapField.Type(), unsafe.Pointer(mapField.UnsafeAddr())).Elem(),
		stateOff:  state.Offset,
		changeOff: change.Offset,
	}, nil
}

func layoutError(what string) error {
	return fmt.Errorf("gossip: memberlist's internal layout changed (%s); transport/gossip_table.go must follow the memberlist version in go.mod", what)
}

// visit calls fn for every member of the table, dead and left ones
// included until memberlist reaps them, with memberlist's lock held: fn
// must copy what it keeps and must not call memberlist.
func (t *memberTable) visit(fn func(n *memberlist.Node, state memberlist.NodeStateType, change time.Time)) {
	t.lock.RLock()
	defer t.lock.RUnlock()
	it := t.nodeMap.MapRange()
	for it.Next() {
		p := it.Value().UnsafePointer()
		if p == nil {
			continue
		}
		fn((*memberlist.Node)(p), *(*memberlist.NodeStateType)(unsafe.Add(p, t.stateOff)), *(*time.Time)(unsafe.Add(p, t.changeOff)))
	}
}
