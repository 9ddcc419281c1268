package fault

import "errors"

// Error is a permanent failure with a stable type name.
type Error struct {
	Type string
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as not worth retrying, under type typ
// (e.g. "HostKeyMismatch", "DanglingLink", "NoSpace", "InvalidSpec").
func Permanent(typ string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Type: typ, Err: err}
}

// TypeOf returns the permanent type of err, if any error in its chain is one.
func TypeOf(err error) (string, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Type, true
	}
	return "", false
}

// Common type names shared by engines and workflows.
const (
	InvalidSpec     = "InvalidSpec"
	NoSpace         = "NoSpace"
	DanglingLink    = "DanglingLink"
	ContentMismatch = "ContentMismatch"
	SourceMissing   = "SourceMissing"
	// SourceIncomplete: a hub repo's download is not finished on the NAS
	// (hubmirror.SourceIncomplete); a fetch finishes it.
	SourceIncomplete = "SourceIncomplete"
	HostKeyMismatch  = "HostKeyMismatch"
	UnknownHost      = "UnknownHost"
	AuthFailed       = "AuthFailed"
	ImageMissing     = "ImageMissing"
	RankExited       = "RankExited"
	StopIncomplete   = "StopIncomplete"
	ProbeFailed      = "ProbeFailed"
	NotEnoughNodes   = "NotEnoughNodes"
	// NoWorker: no worker polls a node's queue, so a step pinned there was
	// never picked up; the fix is to start the node's worker, not to
	// look for bad data.
	NoWorker = "NoWorker"
	// LinkEscape: a source link resolves outside the staging src and the
	// shared roots, or a destination path component is a symlink out of the
	// node's roots; following it would read or write the host's files.
	LinkEscape = "LinkEscape"
	// SourceChanged: a source file kept changing while it was copied
	// (its identity moved between the open and the last byte read, in
	// every attempt); a copy of it could match neither its old bytes nor
	// its new ones, so none is kept. Something is writing to the NAS.
	SourceChanged = "SourceChanged"
	// HookFailed: a post hook (post_exec, post_commands) exited non-zero;
	// running it again would do the same, so the serve step fails.
	HookFailed = "HookFailed"
)

// Items splits err into one error per line item: a fault wrapper around
// joined errors (errors.Join) is opened, and each joined error split in
// turn. Nil is none; any other error is one item.
func Items(err error) []error {
	if err == nil {
		return nil
	}
	var f *Error
	if errors.As(err, &f) && f == err {
		return Items(f.Err)
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Items(e)...)
		}
		return out
	}
	return []error{err}
}
