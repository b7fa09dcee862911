package fsm

import (
	"errors"
	"fmt"
)

// Code is a stable error class, named as Ganeti's ECODE_* values so that
// clients written for Ganeti can branch on it.
type Code string

// Error codes. They cross the API unchanged; never rename one.
const (
	CodeInval      Code = "wrong_input"            // ECODE_INVAL: the request itself is wrong
	CodeState      Code = "wrong_state"            // ECODE_STATE: not possible in the current state
	CodeNoEnt      Code = "unknown_entity"         // ECODE_NOENT: a named object does not exist
	CodeExists     Code = "already_exists"         // ECODE_EXISTS: the object exists already
	CodeNotUnique  Code = "resource_not_unique"    // ECODE_NOTUNIQUE: e.g. an IP in use
	CodeNoRes      Code = "insufficient_resources" // ECODE_NORES
	CodeFault      Code = "internal_error"         // ECODE_FAULT
	CodeFenced     Code = "fenced"                 // gnt: a write from a deposed executor
	CodeQueueFull  Code = "queue_full"             // gnt: the job queue is at its size limit
	CodeUnknownCmd Code = "unknown_command"        // gnt: a log entry of a type this build does not know
)

// Error is the typed error every validation and Apply failure returns. Field
// names the request field at fault when there is one.
type Error struct {
	Code  Code   `json:"code"`
	Field string `json:"field,omitempty"`
	Msg   string `json:"message"`
}

func (e *Error) Error() string {
	if e.Field != "" && e.Msg == "" {
		return string(e.Code) + ": " + e.Field
	}
	return e.Msg
}

// Is makes errors.Is(err, &Error{Code: c}) match any *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code && (t.Field == "" || t.Field == e.Field) && t.Msg == ""
}

// Sentinels for errors.Is.
var (
	ErrInval     = &Error{Code: CodeInval}
	ErrState     = &Error{Code: CodeState}
	ErrNoEnt     = &Error{Code: CodeNoEnt}
	ErrExists    = &Error{Code: CodeExists}
	ErrNotUnique = &Error{Code: CodeNotUnique}
	ErrFenced    = &Error{Code: CodeFenced}
	ErrQueueFull = &Error{Code: CodeQueueFull}
)

func errf(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error, wrapping an untyped error as internal_error.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeFault, Msg: err.Error()}
}
