package oob

// ParamName is the node parameter naming a node's OOB helper.
const ParamName = "oob_program"

// OptOut as a node's (or group's) oob_program means "no OOB helper here",
// whatever the levels above say (doc/design-oob.rst, "New gnt-node
// Property").
const OptOut = "!"

// Program resolves a node's OOB helper from its node parameters at each
// level, most general first (cluster, group, node): the most specific
// level that sets oob_program wins. A level sets it when the key is there
// with a string other than "default" (which, as in Ganeti, means "inherit").
// ok is false when the result is empty (no helper configured) or the
// opt-out "!".
func Program(levels ...map[string]any) (program string, ok bool) {
	for _, l := range levels {
		v, present := l[ParamName]
		if !present {
			continue
		}
		s, isString := v.(string)
		if !isString || s == "default" {
			continue
		}
		program = s
	}
	if program == "" || program == OptOut {
		return "", false
	}
	return program, true
}
