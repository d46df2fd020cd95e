// Package cluster is what serve and its workers share over NATS JetStream
// (docs/architecture.md, "The cluster"): the embedded server with its own CA
// and nkey authentication, subjects and messages, claims whose KV revision
// is a fencing token, join tokens, and git bundles checked at both ends.
//
// It never imports serve, factory or sandbox: serve's side lives in
// cluster/dispatch and the worker in cluster/worker.
package cluster
