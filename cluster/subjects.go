package cluster

import (
	"strings"

	"github.com/kusaw/kusaw/cluster/enroll"
)

// Streams, buckets and subjects (docs/cluster.md has the picture).
const (
	WorkStream    = "KUSAW_WORK"    // work queue: one message per dispatched attempt
	EventsStream  = "KUSAW_EVENTS"  // attempts' live events and results
	WorkersBucket = "KUSAW_WORKERS" // KV: worker name → heartbeat
	// Per pool (store.go): KUSAW_CLAIMS_<pool> (attempt → worker; the
	// claim's sequence is the fencing token) and KUSAW_OBJECTS_<pool>
	// (bundles, logs, artifacts).

	SubjEnroll  = "kusaw.enroll"     // request: a token's secret for an enrollment
	subjWork    = "kusaw.work."      // + pool
	subjEvents  = "kusaw.events."    // + attempt key + "." + worker
	subjResult  = "kusaw.result."    // + attempt key + "." + worker
	subjSecrets = "kusaw.secrets."   // + attempt key + "." + worker: request secrets, sealed
	subjCancel  = "kusaw.cancel."    // + attempt key
	subjBundle  = "kusaw.bundle."    // + attempt key + "." + worker: request a full bundle
	subjControl = "kusaw.control."   // + worker: serve's requests to one worker (drain)
	EnrollUser  = "kusaw-enrollment" // the user name a joining worker connects with
)

// WorkSubject is the work queue subject of a pool.
func WorkSubject(pool string) string { return subjWork + pool }

// EventsSubject, ResultSubject and SecretsSubject name what a worker sends
// about an attempt. The worker's name is the subject's last token, and a
// worker's permissions let it publish only under its own name, so serve
// knows who sent a message from its subject, never from what it says
// (AnyWorker subscribes to them all). CancelSubject is serve's.
func EventsSubject(key, worker string) string  { return subjEvents + key + "." + worker }
func ResultSubject(key, worker string) string  { return subjResult + key + "." + worker }
func SecretsSubject(key, worker string) string { return subjSecrets + key + "." + worker }
func CancelSubject(key string) string          { return subjCancel + key }
func BundleSubject(key, worker string) string  { return subjBundle + key + "." + worker }

// ControlSubject is where serve asks one worker to drain: the worker may
// subscribe to its own only, and only serve may publish there.
func ControlSubject(worker string) string { return subjControl + worker }

// PoolOfWork is the pool of a work message's subject.
func PoolOfWork(subject string) string { return strings.TrimPrefix(subject, subjWork) }

// WorkConsumer is the durable consumer the workers of a pool share on the
// work queue.
func WorkConsumer(pool string) string { return "pool-" + pool }

// AnyWorker stands for the worker token in a subscription.
const AnyWorker = "*"

// SenderOf is the worker a message on an events, result or secrets subject
// came from: its last token, which NATS let only that worker publish.
func SenderOf(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 {
		return ""
	}
	return parts[3]
}

// Key turns an attempt id (<run>/<step>/<n>) into one subject token and KV
// key: run ids and step ids have no dots or slashes, so "/" becomes "_".
func Key(attemptID string) string { return strings.ReplaceAll(attemptID, "/", "_") }

// ValidName reports whether a worker or pool name can be a subject token.
func ValidName(s string) bool { return enroll.ValidName(s) }
