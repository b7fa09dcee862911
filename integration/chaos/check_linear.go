package chaos

import (
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability of the consistent reads and the writes, with Porcupine.
//
// Each object is its own history (tags: a set of strings per object;
// drained: a boolean register per node), checked alone against a model
// that starts from the object's initial state. Writes that surely failed
// are left out; indeterminate writes stay open (they return at +inf, so
// they may take effect at any time after their call, or never as far as
// any read can tell); a tag removal refused because the tag was absent is
// a response like any other. Only reads that promise linearizability are
// in: ?consistent=1 and the CLI's --consistent. Default reads and confd
// are checked by checkStale.

// tagIn and tagOut are the input and output of a tag operation.
type tagIn struct {
	Kind Kind
	Tag  string
}

type tagOut struct {
	NotFound bool     // tag-del: the tag was absent
	Tags     []string // tag-read
}

func tagModel(initial []string) porcupine.Model {
	init := slices.Clone(initial)
	sort.Strings(init)
	return porcupine.Model{
		Init: func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			st, in, out := state.([]string), input.(tagIn), output.(tagOut)
			i, has := slices.BinarySearch(st, in.Tag)
			switch in.Kind {
			case TagAdd:
				if has {
					return true, st
				}
				return true, slices.Insert(slices.Clone(st), i, in.Tag)
			case TagDel:
				if out.NotFound || !has {
					return out.NotFound && !has, st
				}
				return true, slices.Delete(slices.Clone(st), i, i+1)
			case TagRead:
				return slices.Equal(st, out.Tags), st
			}
			return false, st
		},
		Equal: func(a, b any) bool { return slices.Equal(a.([]string), b.([]string)) },
		Hash: func(state any) uint64 {
			h := fnv.New64a()
			for _, t := range state.([]string) {
				h.Write([]byte(t))
				h.Write([]byte{0})
			}
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(tagIn), output.(tagOut)
			switch in.Kind {
			case TagAdd:
				return "add " + in.Tag
			case TagDel:
				if out.NotFound {
					return "del " + in.Tag + " -> not found"
				}
				return "del " + in.Tag
			}
			return fmt.Sprintf("read -> %v", out.Tags)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%v", state) },
	}
}

// drainIn and drainOut are the input and output of a drained-flag operation.
type drainIn struct {
	Set   bool
	Value bool
}

type drainOut struct{ Value bool }

func drainModel(initial bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return initial },
		Step: func(state, input, output any) (bool, any) {
			st, in := state.(bool), input.(drainIn)
			if in.Set {
				return true, in.Value
			}
			return output.(drainOut).Value == st, st
		},
		Equal: func(a, b any) bool { return a.(bool) == b.(bool) },
		Hash: func(state any) uint64 {
			if state.(bool) {
				return 1
			}
			return 0
		},
		DescribeOperation: func(input, output any) string {
			in := input.(drainIn)
			if in.Set {
				return fmt.Sprintf("set drained=%v", in.Value)
			}
			return fmt.Sprintf("read -> drained=%v", output.(drainOut).Value)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("drained=%v", state) },
	}
}

// LinearResult is the outcome of the linearizability check.
type LinearResult struct {
	// Checked is the number of object histories checked; Ok, Illegal and
	// Unknown (timed out: not verified, so a failure) add up to it.
	Checked, Ok, Illegal, Unknown int
	// Operations is the number of operations checked.
	Operations int
	Failures   []string
	pages      []linearPage
}

type linearPage struct {
	object string
	model  porcupine.Model
	info   porcupine.LinearizationInfo
}

// linearHistories builds one Porcupine history per object ("tags:OBJECT"
// or "drained:node/NAME"), with its model.
func linearHistories(ops []*Op, initial State) (map[string][]porcupine.Operation, map[string]porcupine.Model) {
	hist := map[string][]porcupine.Operation{}
	models := map[string]porcupine.Model{}
	key := func(o *Op) string {
		if o.Kind == DrainSet || o.Kind == DrainRead {
			return "drained:" + o.Object
		}
		return "tags:" + o.Object
	}
	add := func(o *Op, in, out any, open bool) {
		ret := o.Return
		if open {
			ret = math.MaxInt64
		}
		hist[key(o)] = append(hist[key(o)], porcupine.Operation{
			ClientId: o.Client, Input: in, Output: out, Call: o.Call, Return: ret, Metadata: o})
	}
	linearRead := func(o *Op) bool {
		return o.Outcome == OK && (o.Mode == ModeConsistent || o.Mode == ModeCLI)
	}
	for _, o := range ops {
		switch o.Kind {
		case TagAdd:
			if o.Outcome != Failed {
				add(o, tagIn{Kind: TagAdd, Tag: o.Value}, tagOut{}, o.Outcome == Indeterminate)
			}
		case TagDel:
			switch {
			case o.Outcome == Failed && o.Code == "noent":
				add(o, tagIn{Kind: TagDel, Tag: o.Value}, tagOut{NotFound: true}, false)
			case o.Outcome != Failed:
				add(o, tagIn{Kind: TagDel, Tag: o.Value}, tagOut{}, o.Outcome == Indeterminate)
			}
		case TagRead:
			if linearRead(o) {
				tags := slices.Clone(o.Values)
				sort.Strings(tags)
				add(o, tagIn{Kind: TagRead}, tagOut{Tags: tags}, false)
			}
		case DrainSet:
			if o.Outcome != Failed {
				add(o, drainIn{Set: true, Value: o.Value == "true"}, drainOut{}, o.Outcome == Indeterminate)
			}
		case DrainRead:
			if linearRead(o) {
				add(o, drainIn{}, drainOut{Value: o.Value == "true"}, false)
			}
		default:
			continue
		}
		if _, ok := models[key(o)]; ok {
			continue
		}
		if o.Kind == DrainSet || o.Kind == DrainRead {
			models[key(o)] = drainModel(initial.Drained[nodeName(o.Object)])
		} else {
			models[key(o)] = tagModel(initial.Tags[o.Object])
		}
	}
	return hist, models
}

// CheckLinearizable checks every object's history with Porcupine, each
// within timeout.
func CheckLinearizable(ops []*Op, initial State, timeout time.Duration) LinearResult {
	hist, models := linearHistories(ops, initial)
	var objects []string
	for obj := range hist {
		objects = append(objects, obj)
	}
	sort.Strings(objects)
	var r LinearResult
	for _, obj := range objects {
		h, m := hist[obj], models[obj]
		res, info := porcupine.CheckOperationsVerbose(m, h, timeout)
		r.Checked++
		r.Operations += len(h)
		switch res {
		case porcupine.Ok:
			r.Ok++
			continue
		case porcupine.Unknown:
			r.Unknown++
			r.Failures = append(r.Failures, fmt.Sprintf("%s: not verified within %v (%d operations)", obj, timeout, len(h)))
		default:
			r.Illegal++
			r.Failures = append(r.Failures, fmt.Sprintf("%s: not linearizable (%d operations)%s", obj, len(h), stuckAt(info)))
		}
		r.pages = append(r.pages, linearPage{object: obj, model: m, info: info})
	}
	return r
}

// stuckAt names the operation after the longest linearizable prefix.
func stuckAt(info porcupine.LinearizationInfo) string {
	ops := info.PartialLinearizationsOperations()
	var longest []porcupine.Operation
	for _, part := range ops {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	if len(longest) == 0 {
		return ""
	}
	last := longest[len(longest)-1]
	if o, ok := last.Metadata.(*Op); ok {
		return "; longest linearizable prefix ends with " + o.Describe()
	}
	return ""
}

// SavePages writes the Porcupine page of every history that failed, with
// the faults as annotations, into dir; it returns the files written.
func (r *LinearResult) SavePages(dir string, faults []Fault) ([]string, error) {
	var files []string
	for _, p := range r.pages {
		var notes []porcupine.Annotation
		for _, f := range faults {
			notes = append(notes, porcupine.Annotation{Tag: "faults", Start: f.Start, End: max(f.End, f.Start),
				Description: f.Kind, Details: strings.Join(f.Targets, " ") + " " + f.Detail, BackgroundColor: "#fde2e2"})
		}
		p.info.AddAnnotations(notes)
		p.model.DescribeOperationMetadata = func(info any) string {
			if o, ok := info.(*Op); ok {
				return o.Describe()
			}
			return ""
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return files, err
		}
		path := filepath.Join(dir, "porcupine-"+strings.NewReplacer("/", "-", ":", "-").Replace(p.object)+".html")
		if err := porcupine.VisualizePath(p.model, p.info, path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// nodeName is the node of a "node/NAME" object.
func nodeName(object string) string { return strings.TrimPrefix(object, "node/") }
