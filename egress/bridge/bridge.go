// Package bridge is the first process inside a Linux sandbox with
// network: allowlist: it binds the proxy's listener on loopback in the
// sandbox's network namespace, hands it to the proxy over the lease's Unix
// socket (SCM_RIGHTS), and replaces itself with the step's command.
//
// It is its own small package, importing neither net nor net/http, so that
// the kusaw-bridge binary built from it starts in a fraction of the time
// the whole kusaw binary needs: every sandboxed step with an allowlist
// pays that start (docs/benchmarks.md).
package bridge

import "time"

// Error is a failure of the bridge before the step runs. Code is the exit
// status the bridge ends with.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Exit statuses of the bridge when the step could not start.
const (
	ExitHandOver = 125 // the listener could not be set up or handed over
	ExitNoExec   = 126 // the command exists but cannot be run
	ExitNotFound = 127 // the command is not on PATH
)

// Hello opens the message that carries the listener; the version lets a
// newer proxy refuse an older bridge clearly.
const Hello = "kusaw-egress-handover 1\n"

// Timeout bounds the hand-over at both ends.
const Timeout = 10 * time.Second

// BinaryName is the dedicated bridge binary, installed beside kusaw.
const BinaryName = "kusaw-bridge"

const usage = "usage: kusaw-bridge --lease SOCKET --listen 127.0.0.1:PORT [--local PORT,...] -- COMMAND [ARG...]"
