// Package config reads factory.yaml: typed structs that keep each value's
// line and column, structural validation with stable codes, and the pure
// rules of docs/architecture.md, "Effective sandbox mode" (and an attempt's allowlist).
// It is the leaf of kusaw's packages: it imports nothing of kusaw but status.
package config
