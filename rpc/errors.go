package rpc

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gnt-cluster/gnt/fsm"
)

// Error codes of the API beyond the state machine's (fsm.Code values are
// used as they are).
const (
	CodeNoLeader      = "no_leader"      // no leader is known within the hold time
	CodeIndeterminate = "indeterminate"  // leadership lost mid-write: outcome unknown
	CodeTooLarge      = "body_too_large" // request body over the limit
	CodeNotFound      = "not_found"      // unknown path or object
	CodeMethod        = "method_not_allowed"
	CodeUnauthorized  = "unauthorized"    // bad or missing signature
	CodeNotCandidate  = "not_a_candidate" // this gntd holds no state
	CodeUnavailable   = "unavailable"     // e.g. shutting down
	CodeTimeout       = "timeout"
)

// APIError is the JSON body of every error response, in Ganeti's RAPI form
// (code, message, explain) plus a stable error_code and the field at fault.
// Every layer answers with it (the router's 404 and 405, authentication's
// 401 and 403, forwarding, holds, handlers), always with all of code,
// message, explain and error_code: Ganeti's client reads code, message and
// explain of every error body, and fails with a KeyError on a body
// without one of them.
type APIError struct {
	Status    int    `json:"code"`
	Message   string `json:"message"`
	Explain   string `json:"explain"`
	ErrorCode string `json:"error_code"`
	Field     string `json:"field,omitempty"`
}

// body is the error as it is sent: a status (500 when none was set), an
// explanation (the message when none was set) and an error code (the
// HTTP status's when none was set).
func (e *APIError) body() *APIError {
	c := *e
	if c.Status == 0 {
		c.Status = http.StatusInternalServerError
	}
	if c.Explain == "" {
		c.Explain = c.Message
	}
	if c.Message == "" {
		c.Message = http.StatusText(c.Status)
		if c.Explain == "" {
			c.Explain = c.Message
		}
	}
	if c.ErrorCode == "" {
		c.ErrorCode = "http_" + strconv.Itoa(c.Status)
	}
	return &c
}

func (e *APIError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (%s, field %s)", e.Message, e.ErrorCode, e.Field)
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.ErrorCode)
}

// Is matches an *APIError with the same ErrorCode.
func (e *APIError) Is(target error) bool {
	var t *APIError
	return errors.As(target, &t) && t.ErrorCode == e.ErrorCode
}

// StatusFor maps a state-machine error code to an HTTP status.
func StatusFor(code fsm.Code) int {
	switch code {
	case fsm.CodeInval:
		return http.StatusBadRequest
	case fsm.CodeNoEnt:
		return http.StatusNotFound
	case fsm.CodeExists, fsm.CodeNotUnique, fsm.CodeState:
		return http.StatusConflict
	case fsm.CodeNoRes:
		return http.StatusConflict
	case fsm.CodeQueueFull:
		return http.StatusServiceUnavailable
	case fsm.CodeFenced:
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// FromFSM converts a state-machine error into an API error.
func FromFSM(e *fsm.Error) *APIError {
	return &APIError{Status: StatusFor(e.Code), Message: e.Msg, Explain: e.Msg, ErrorCode: string(e.Code), Field: e.Field}
}
