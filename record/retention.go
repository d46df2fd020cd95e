package record

import (
	"strings"
	"time"
)

// Pipeline names kusaw records for runs that are not a pipeline's: kusaw
// sandbox exec's command and sandbox doctor's probes. They are in
// parentheses, which a pipeline name cannot have.
const (
	ExecPipeline   = "(sandbox exec)"
	DoctorPipeline = "(sandbox doctor)"
)

// SandboxRun reports whether the run is kusaw sandbox exec's or doctor's,
// not a pipeline's: kusaw runs and the web page leave these out unless
// asked, and retention removes them sooner.
func (r *RunRecord) SandboxRun() bool { return strings.HasPrefix(r.Pipeline, "(sandbox ") }

// Ended is when the run ended, or when it was made if it has no end.
func (r *RunRecord) Ended() time.Time {
	if r.Finished != nil {
		return *r.Finished
	}
	return r.Created
}

// Delivered reports whether the run's work went somewhere (merged, pushed,
// a pull request): retention keeps such a run, whose branch a pull request
// or a follow-up may still name.
func (r *RunRecord) Delivered() bool { return r.Delivery != nil && r.Delivery.State == DeliveryDone }
