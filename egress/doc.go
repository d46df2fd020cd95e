// Package egress is kusaw's allowlist proxy: host matching, the address
// guard, per-attempt leases, the in-namespace bridge, key injection and the
// per-decision egress log.
package egress
