// Package providers knows the coding-agent CLIs kusaw runs as agent steps
// (claude-code, cursor): probe, argv, env names, login folders, egress hosts,
// stream parsing and capabilities.
//
// It imports only status; the engine passes plain data in (RunRequest,
// Mode) and gets plain data back (argv, events, Result, Matrix).
package providers

//go:generate go run ./internal/gencaps -o ../docs/reference/capabilities.md
