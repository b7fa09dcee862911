package rpc

import (
	"errors"
	"net/http"

	"github.com/gnt-cluster/gnt/fsm"
)

// The RAPI users (gnt cluster rapi-users): every route needs write
// access, and no answer holds a password or a hash.

// RAPIUserInfo is one user as GET /2/gnt/rapi-users lists it.
type RAPIUserInfo struct {
	Name string `json:"name"`
	// Access is "read", "write" or "read,write", as the users file
	// writes it.
	Access string `json:"access"`
}

// ImportRAPIUsersRequest is the body of PUT /2/gnt/rapi-users: a whole
// users file, which replaces every user.
type ImportRAPIUsersRequest struct {
	UsersFile string `json:"users_file"`
}

// AddRAPIUserRequest is the body of POST /2/gnt/rapi-users.
type AddRAPIUserRequest struct {
	Name string `json:"name"`
	// Password is in the users file's syntax: plain text,
	// {cleartext}PASSWORD or {HA1}HEX.
	Password string `json:"password"`
	Write    bool   `json:"write,omitempty"`
}

// SetRAPIUserPasswordRequest is the body of PUT /2/gnt/rapi-users/{name}.
type SetRAPIUserPasswordRequest struct {
	Password string `json:"password"`
}

// RAPIUsersResponse answers a change of the users.
type RAPIUsersResponse struct {
	Users int `json:"users"` // how many users there are now
}

// handleRAPIUsers is GET /2/gnt/rapi-users, from this gntd's replica.
func (s *Server) handleRAPIUsers(w http.ResponseWriter, r *http.Request) {
	out := []RAPIUserInfo{}
	s.b.FSM().Read(func(st *fsm.State, idx uint64) {
		setIndex(w, idx)
		for _, u := range st.SortedRAPIUsers() {
			acc := u.Access()
			if acc == "" {
				acc = "read"
			}
			out = append(out, RAPIUserInfo{Name: u.Name, Access: acc})
		}
	})
	writeJSON(w, out)
}

// handleRAPIUsersImport is PUT /2/gnt/rapi-users.
func (s *Server) handleRAPIUsersImport(w http.ResponseWriter, r *http.Request) {
	var req ImportRAPIUsersRequest
	body, ok := s.userBody(w, r, &req)
	if !ok {
		return
	}
	entries, err := ParseUsersFile([]byte(req.UsersFile))
	if err != nil {
		writeError(w, badRequest("users_file", "%v; no user was changed", err))
		return
	}
	s.proposeUsers(w, r, body, entries, func(users []fsm.RAPIUser) fsm.Command {
		return fsm.RAPIUsersReplace{Now: s.b.Now().UnixNano(), Users: users}
	})
}

// handleRAPIUserAdd is POST /2/gnt/rapi-users.
func (s *Server) handleRAPIUserAdd(w http.ResponseWriter, r *http.Request) {
	var req AddRAPIUserRequest
	body, ok := s.userBody(w, r, &req)
	if !ok {
		return
	}
	e, aerr := userEntry(req.Name, req.Password)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	e.Read, e.Write = true, req.Write
	s.proposeUsers(w, r, body, []UserEntry{e}, func(users []fsm.RAPIUser) fsm.Command {
		return fsm.RAPIUserPut{Now: s.b.Now().UnixNano(), Mode: fsm.PutAdd, User: users[0]}
	})
}

// handleRAPIUserPasswd is PUT /2/gnt/rapi-users/{name}.
func (s *Server) handleRAPIUserPasswd(w http.ResponseWriter, r *http.Request) {
	var req SetRAPIUserPasswordRequest
	body, ok := s.userBody(w, r, &req)
	if !ok {
		return
	}
	e, aerr := userEntry(r.PathValue("name"), req.Password)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	s.proposeUsers(w, r, body, []UserEntry{e}, func(users []fsm.RAPIUser) fsm.Command {
		return fsm.RAPIUserPut{Now: s.b.Now().UnixNano(), Mode: fsm.PutPasswd, User: users[0]}
	})
}

// handleRAPIUserRemove is DELETE /2/gnt/rapi-users/{name}.
func (s *Server) handleRAPIUserRemove(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if e := fsm.ValidateRAPIUserName("name", name); e != nil {
		writeError(w, FromFSM(e))
		return
	}
	s.proposeUsers(w, r, nil, nil, func([]fsm.RAPIUser) fsm.Command {
		return fsm.RAPIUserRemove{Now: s.b.Now().UnixNano(), Name: name}
	})
}

// userBody reads and decodes a request body; on bad input it answers
// and returns false.
func (s *Server) userBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	body, aerr := s.readBody(r)
	if aerr == nil {
		aerr = decodeBody(body, v)
	}
	if aerr != nil {
		writeError(w, aerr)
		return nil, false
	}
	return body, true
}

// userEntry checks a user name and a password field.
func userEntry(name, password string) (UserEntry, *APIError) {
	if e := fsm.ValidateRAPIUserName("name", name); e != nil {
		return UserEntry{}, FromFSM(e)
	}
	e, err := ParsePassword(name, password)
	if err != nil {
		return UserEntry{}, badRequest("password", "%v", err)
	}
	return e, nil
}

// proposeUsers hashes the plain-text passwords of entries and applies the
// command build makes of them, on the leader: the request goes to the
// leader as it came, and the leader, the proposer, hashes.
func (s *Server) proposeUsers(w http.ResponseWriter, r *http.Request, body []byte, entries []UserEntry, build func([]fsm.RAPIUser) fsm.Command) {
	s.onLeader(w, r, body, func() error {
		users := make([]fsm.RAPIUser, len(entries))
		for i, e := range entries {
			u, err := e.Stored(s.bcryptCost)
			if err != nil {
				writeError(w, badRequest("password", "%v", err))
				return nil
			}
			users[i] = u
		}
		resp, idx, err := s.b.Apply(r.Context(), build(users))
		if errors.Is(err, ErrNotLeader) {
			return ErrNotLeader
		}
		if err != nil {
			writeError(w, asAPIError(err))
			return nil
		}
		if resp.Err != nil {
			writeError(w, FromFSM(resp.Err))
			return nil
		}
		n := 0
		s.b.FSM().Read(func(st *fsm.State, _ uint64) { n = len(st.RAPIUsers) })
		setIndex(w, idx)
		writeJSON(w, RAPIUsersResponse{Users: n})
		return nil
	})
}
