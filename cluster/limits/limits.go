// Package limits holds the sizes of the cluster's streams and of the NATS
// server that carries them, for code that needs the numbers without the
// NATS code itself: kusaw cluster nats-config runs in kusaw, which does
// not link nats-server (only kusaw-daemon does). Package cluster says what
// each one bounds.
package limits

const (
	EventsMaxBytes   int64 = 1 << 30   // the events stream
	ObjectsMaxBytes  int64 = 4 << 30   // each pool's object store
	WorkMaxBytes     int64 = 256 << 20 // the work queue
	WorkersMaxBytes  int64 = 64 << 20  // the heartbeats
	ClaimsMaxBytes   int64 = 16 << 20  // each pool's claims
	AccountMaxMemory int64 = 64 << 20  // the account's memory streams (kusaw keeps none)
	// MaxPayload is the largest message kusaw sends (an attempt's spec).
	MaxPayload = 8 << 20
	// StoreNeeded is the JetStream storage serve's streams, buckets and
	// one pool's stores may take together: what an account must allow.
	StoreNeeded = EventsMaxBytes + WorkMaxBytes + WorkersMaxBytes + ObjectsMaxBytes + ClaimsMaxBytes
)
