// Package e2e holds end-to-end tests that build the kusaw binary once and run
// it against real git, real bwrap and local network peers.
package e2e
