package status

// ExitCode is a documented process exit status of the kusaw CLI.
type ExitCode int

const (
	ExitOK                 ExitCode = 0
	ExitRunFailed          ExitCode = 1
	ExitUsage              ExitCode = 2
	ExitInvalidConfig      ExitCode = 3
	ExitSandboxUnavailable ExitCode = 4
	ExitNotFound           ExitCode = 5
	ExitServeUnavailable   ExitCode = 6
	ExitVerifyFailed       ExitCode = 7
	ExitEgressRefused      ExitCode = 8
	ExitDeliverFailed      ExitCode = 9
	ExitNotEnrolled        ExitCode = 10
	ExitInternal           ExitCode = 70
	ExitInterrupted        ExitCode = 130
)

// ExitCodes lists every exit code with when kusaw uses it.
var ExitCodes = []struct {
	Code    ExitCode
	Name    string
	Meaning string
}{
	{ExitOK, "ok", "success; for validate: the file is valid (warnings allowed)"},
	{ExitRunFailed, "run_failed", "the run (or the command run by sandbox exec) failed"},
	{ExitUsage, "usage", "wrong flags or arguments"},
	{ExitInvalidConfig, "invalid_config", "the factory file is missing or invalid"},
	{ExitSandboxUnavailable, "sandbox_unavailable", "a required sandbox cannot run on this machine"},
	{ExitNotFound, "not_found", "the named run, step, attempt, key or file does not exist"},
	{ExitServeUnavailable, "serve_unavailable", "kusaw serve is not running, or cannot work: not connected to its NATS server, or its state folder takes no writes (service status)"},
	{ExitVerifyFailed, "verify_failed", "a log's hash chain or seal does not verify"},
	{ExitEgressRefused, "egress_refused", "kusaw egress check: the proxy would refuse the connection"},
	{ExitDeliverFailed, "deliver_failed", "kusaw deliver: a delivery step (merge, push, pull request) failed; the run itself stays succeeded"},
	{ExitNotEnrolled, "not_enrolled", "kusaw worker: serve refused the worker (no enrollment, a used or forged token, a key serve does not know, another serve's CA)"},
	{ExitInternal, "internal", "an internal error; please report it"},
	{ExitInterrupted, "interrupted", "interrupted by SIGINT/SIGTERM; the run is recorded as canceled"},
}
