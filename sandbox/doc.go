// Package sandbox computes an attempt's sandbox plan (pure data) and runs a
// process under an OS backend: bubblewrap on Linux, Seatbelt on macOS.
package sandbox
