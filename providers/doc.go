// Package providers knows the coding-agent CLIs kusaw runs as agent steps
// (claude-code, cursor): probe, argv, env names, login folders, egress hosts,
// stream parsing and capabilities.
package providers
