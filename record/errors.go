package record

import "errors"

// Errors that cross the API: serve/client maps its error codes back to them,
// so errors.Is works the same in-process and through serve.
var (
	// ErrNoRun is returned for a run id that does not exist.
	ErrNoRun = errors.New("no such run")
	// ErrAmbiguousRun is returned for a run id prefix more than one run has.
	ErrAmbiguousRun = errors.New("ambiguous run id")
	// ErrUnknownPipeline wraps Pipeline's errors for callers that map it to a
	// usage exit code.
	ErrUnknownPipeline = errors.New("unknown pipeline")
	// ErrUnknownStep is returned for a step id the factory does not have.
	ErrUnknownStep = errors.New("unknown step")
	// ErrRunEnded is returned when canceling a run that already ended.
	ErrRunEnded = errors.New("run already ended")
	// ErrBadParams wraps a refused run parameter.
	ErrBadParams = errors.New("bad run parameter")
)
