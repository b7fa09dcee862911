package fsm

import (
	"sort"
	"strings"
)

// RAPI users: Ganeti's users file (rapi_users), kept in the replicated
// state so that every candidate enforces the same list. The proposer
// turns a plain-text password into a bcrypt hash before it proposes the
// command; Apply only checks that what it stores has the shape of a
// hash, so no password in plain text ever reaches the log, a snapshot or
// a replica. An {HA1} entry (hex MD5 of "user:Ganeti Remote API:password",
// RFC 2617's H(A1)) is stored as given.
//
// Every change of the list is a configuration change: it bumps the
// cluster's serial number.

// Password schemes of a stored RAPI user.
const (
	SchemeBcrypt = "bcrypt" // Hash is a bcrypt hash ($2a$, $2b$ or $2y$)
	SchemeHA1    = "ha1"    // Hash is 32 lower-case hex digits
)

// Limits of the RAPI users list.
const (
	MaxRAPIUsers       = 10000 // users in the list
	MaxRAPIUserNameLen = 64    // bytes of a user name
)

// RAPIUser is one user of the API with the stored form of its password
// and its access. Write implies read: a user without either flag may read
// (Ganeti's users file gives a user without options read access).
type RAPIUser struct {
	Name   string `json:"name"`
	Scheme string `json:"scheme"`
	Hash   string `json:"hash"`
	Read   bool   `json:"read,omitempty"`
	Write  bool   `json:"write,omitempty"`
}

// CanWrite reports whether the user may change the cluster.
func (u *RAPIUser) CanWrite() bool { return u.Write }

// Access is the user's options as the users file writes them: "write",
// "read", "read,write", or "" (no options: read access).
func (u *RAPIUser) Access() string {
	switch {
	case u.Read && u.Write:
		return "read,write"
	case u.Write:
		return "write"
	case u.Read:
		return "read"
	}
	return ""
}

// RAPIUsersReplace replaces the whole list of users (an import of a
// users file); an empty list removes every user.
type RAPIUsersReplace struct {
	Now   int64      `json:"now"`
	Users []RAPIUser `json:"users"`
}

// Modes of a RAPIUserPut.
const (
	PutAdd    = "add"    // the user must not exist yet
	PutPasswd = "passwd" // the user must exist; its access is kept
)

// RAPIUserPut adds a user, or changes the password of one.
type RAPIUserPut struct {
	Now  int64    `json:"now"`
	Mode string   `json:"mode"`
	User RAPIUser `json:"user"`
}

// RAPIUserRemove removes a user.
type RAPIUserRemove struct {
	Now  int64  `json:"now"`
	Name string `json:"name"`
}

// CommandType implementations.
func (RAPIUsersReplace) CommandType() CommandType { return CmdRAPIUsersReplace }
func (RAPIUserPut) CommandType() CommandType      { return CmdRAPIUserPut }
func (RAPIUserRemove) CommandType() CommandType   { return CmdRAPIUserRemove }

// ValidateRAPIUserName checks a user name: 1 to MaxRAPIUserNameLen bytes
// of printable ASCII without blanks, ':' (which would end the name in HTTP
// basic auth) or '#' at its start (a comment in the users file).
func ValidateRAPIUserName(field, name string) *Error {
	if name == "" {
		return errf(CodeInval, field, "%s must not be empty", field)
	}
	if len(name) > MaxRAPIUserNameLen {
		return errf(CodeInval, field, "%s is %d bytes long; the limit is %d", field, len(name), MaxRAPIUserNameLen)
	}
	if name[0] == '#' {
		return errf(CodeInval, field, "%s %q must not begin with '#'", field, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return errf(CodeInval, field, "%s %q: byte %d (%q) is not allowed (printable ASCII without blanks or ':')", field, name, i, c)
		}
	}
	return nil
}

// Validate checks a user as it is to be stored.
func (u *RAPIUser) Validate(field string) *Error {
	if e := ValidateRAPIUserName(field+".name", u.Name); e != nil {
		return e
	}
	switch u.Scheme {
	case SchemeBcrypt:
		if len(u.Hash) != 60 || !(strings.HasPrefix(u.Hash, "$2a$") || strings.HasPrefix(u.Hash, "$2b$") || strings.HasPrefix(u.Hash, "$2y$")) {
			return errf(CodeInval, field+".hash", "user %s: a bcrypt hash is 60 characters beginning with $2a$, $2b$ or $2y$", u.Name)
		}
	case SchemeHA1:
		if len(u.Hash) != 32 || strings.Trim(u.Hash, "0123456789abcdef") != "" {
			return errf(CodeInval, field+".hash", "user %s: an HA1 hash is 32 lower-case hex digits", u.Name)
		}
	default:
		return errf(CodeInval, field+".scheme", "user %s: password scheme %q is not %s or %s", u.Name, u.Scheme, SchemeBcrypt, SchemeHA1)
	}
	return nil
}

// RAPIUser returns the user of that name, or nil.
func (s *State) RAPIUser(name string) *RAPIUser { return s.RAPIUsers[name] }

// SortedRAPIUsers returns the users ordered by name.
func (s *State) SortedRAPIUsers() []*RAPIUser {
	out := make([]*RAPIUser, 0, len(s.RAPIUsers))
	for _, u := range s.RAPIUsers {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RAPIAnonymousRead reports whether the cluster lets requests without
// credentials read (the cluster option rapi_anonymous_read).
func (s *State) RAPIAnonymousRead() bool {
	return s.Cluster != nil && s.Cluster.RAPIAnonymousRead
}

// setRAPIUsers stores a new list (never changing the old map, which a
// frozen view may share) and bumps the cluster's serial number.
func (s *State) setRAPIUsers(now int64, users map[string]*RAPIUser) {
	if len(users) == 0 {
		users = nil
	}
	s.RAPIUsers = users
	t := s.begin(now)
	t.clusterRW()
	t.commit()
}

func (s *State) applyRAPIUsersReplace(c *RAPIUsersReplace) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	if len(c.Users) > MaxRAPIUsers {
		return Response{Err: errf(CodeInval, "users", "%d users; the limit is %d", len(c.Users), MaxRAPIUsers)}
	}
	users := make(map[string]*RAPIUser, len(c.Users))
	for i := range c.Users {
		u := c.Users[i]
		if e := u.Validate("users"); e != nil {
			return Response{Err: e}
		}
		if users[u.Name] != nil {
			return Response{Err: errf(CodeNotUnique, "users.name", "user %s is listed twice", u.Name)}
		}
		users[u.Name] = &u
	}
	s.setRAPIUsers(c.Now, users)
	return Response{}
}

func (s *State) applyRAPIUserPut(c *RAPIUserPut) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	u := c.User
	if e := u.Validate("user"); e != nil {
		return Response{Err: e}
	}
	old := s.RAPIUsers[u.Name]
	switch c.Mode {
	case PutAdd:
		if old != nil {
			return Response{Err: errf(CodeExists, "user.name", "user %s exists already; change its password with passwd or remove it first", u.Name)}
		}
		if len(s.RAPIUsers) >= MaxRAPIUsers {
			return Response{Err: errf(CodeInval, "user", "there are %d users already; the limit is %d", len(s.RAPIUsers), MaxRAPIUsers)}
		}
	case PutPasswd:
		if old == nil {
			return Response{Err: errf(CodeNoEnt, "user.name", "user %s does not exist", u.Name)}
		}
		u.Read, u.Write = old.Read, old.Write
	default:
		return Response{Err: errf(CodeInval, "mode", "mode %q is not %s or %s", c.Mode, PutAdd, PutPasswd)}
	}
	users := make(map[string]*RAPIUser, len(s.RAPIUsers)+1)
	for k, v := range s.RAPIUsers {
		users[k] = v
	}
	users[u.Name] = &u
	s.setRAPIUsers(c.Now, users)
	return Response{}
}

func (s *State) applyRAPIUserRemove(c *RAPIUserRemove) Response {
	if s.Cluster == nil {
		return Response{Err: errf(CodeState, "", "cluster is not initialised")}
	}
	if s.RAPIUsers[c.Name] == nil {
		return Response{Err: errf(CodeNoEnt, "name", "user %q does not exist", c.Name)}
	}
	users := make(map[string]*RAPIUser, len(s.RAPIUsers))
	for k, v := range s.RAPIUsers {
		if k != c.Name {
			users[k] = v
		}
	}
	s.setRAPIUsers(c.Now, users)
	return Response{}
}
