package cluster

import "github.com/kusaw/kusaw/cluster/enroll"

// The registry of enrolled workers and the grants of join tokens live in
// package enroll, which kusaw's own commands read without linking NATS;
// the cluster's code keeps using them by these names.
type (
	Enrolled = enroll.Enrolled
	Registry = enroll.Registry
	Grant    = enroll.Grant
)

// AnyPool stands for every pool in a grant's list.
const AnyPool = enroll.AnyPool

// OpenRegistry reads dir's registry.
func OpenRegistry(dir string) *Registry { return enroll.OpenRegistry(dir) }

// EverOffered is enroll.EverOffered.
func EverOffered(dir string) map[string]bool { return enroll.EverOffered(dir) }

// AllowedPools is enroll.AllowedPools.
func AllowedPools(dir string) map[string]bool { return enroll.AllowedPools(dir) }
