// Package status holds kusaw's enumerations: run states, attempt outcomes,
// typed reason codes (each with a message and a fix) and CLI exit codes.
// docs/reference/statuses.md is generated from it. It imports nothing.
package status
