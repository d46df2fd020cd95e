// Package chainlog writes and verifies tamper-evident JSON-lines logs: each
// line carries the hash of the line before it, and seals signed with the
// factory's ed25519 key bound what a crash or an edit can hide.
package chainlog
