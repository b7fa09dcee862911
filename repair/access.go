package repair

import (
	"net/http"
	"net/url"
)

// Access is what a maintd request needs of its user: to read, or to
// write (change the cluster's state).
type Access int

// The access levels, as Ganeti's RAPI users have them.
const (
	AccessRead Access = iota
	AccessWrite
)

func (a Access) String() string {
	if a == AccessWrite {
		return "write"
	}
	return "read"
}

// AccessOf classifies a request: GET and HEAD read (the status, the
// jobs, the evacuated instances, the plan, the web page); every other
// method needs write access: POST /1/cancel/ID, and whatever method a
// client tries on a path that has no such route (it gets 404 or 405, but
// only after the check, so an unauthorised client learns nothing).
func AccessOf(r *http.Request) Access {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return AccessRead
	}
	return AccessWrite
}

// AuthRealm is the basic-auth realm maintd challenges with when the
// Authorize hook answers 401 without a WWW-Authenticate header of its own.
const AuthRealm = "gnt maintd"

// challengeWriter sees the status the Authorize hook answers with and,
// on a 401 without a WWW-Authenticate header, adds a basic-auth challenge:
// a browser then asks its user for a name and password (the web page
// needs that), and API clients are told how to authenticate.
type challengeWriter struct {
	http.ResponseWriter
	wrote bool
}

func (c *challengeWriter) WriteHeader(code int) {
	if c.wrote {
		return
	}
	c.wrote = true
	if code == http.StatusUnauthorized && c.Header().Get("WWW-Authenticate") == "" {
		c.Header().Set("WWW-Authenticate", `Basic realm="`+AuthRealm+`", charset="UTF-8"`)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *challengeWriter) Write(b []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (c *challengeWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// authorize runs the Service's Authorize hook; false when it refused the
// request (and the refusal was answered).
func (s *Service) authorize(w http.ResponseWriter, r *http.Request, a Access) bool {
	if s.Authorize == nil {
		return true
	}
	cw := &challengeWriter{ResponseWriter: w}
	if s.Authorize(cw, r, a == AccessWrite) {
		if cw.wrote {
			// The hook let the request through but answered it: serving
			// it too would write a second answer.
			s.log().Warn("maintd Authorize answered a request it allowed", "method", r.Method, "path", r.URL.Path)
			return false
		}
		return true
	}
	if !cw.wrote {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "forbidden", "code": "forbidden"})
	}
	return false
}

// crossOrigin reports a request sent by a page of another origin (a
// browser says where it comes from in Origin): a browser with cached
// basic-auth credentials would send them along, so a write from another
// origin is refused (no cross-site request forgery). Clients that are not
// browsers send no Origin.
func crossOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err != nil || u.Host != r.Host
}
