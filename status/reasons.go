package status

import (
	"fmt"
	"slices"
	"strings"
)

// Reason is a typed code that says why an attempt or run ended as it did.
type Reason string

// ReasonInfo is the user-facing explanation of a reason: what happened and
// what to do about it.
type ReasonInfo struct {
	Code    Reason
	Message string
	Fix     string
}

const (
	ReasonNone                Reason = ""
	ReasonStepExitNonzero     Reason = "step.exit_nonzero"
	ReasonStepTimeout         Reason = "step.timeout"
	ReasonStepCanceled        Reason = "step.canceled"
	ReasonStepStartFailed     Reason = "step.start_failed"
	ReasonSetupFailed         Reason = "setup.failed"
	ReasonSandboxUnavailable  Reason = "sandbox.unavailable"
	ReasonSandboxUntrusted    Reason = "sandbox.untrusted_binary"
	ReasonSandboxNoUserNS     Reason = "sandbox.userns_unavailable"
	ReasonSandboxTokenMissing Reason = "sandbox.token_missing"
	ReasonSandboxPlanRefused  Reason = "sandbox.plan_refused"
	ReasonProviderNoResult    Reason = "provider.no_result"
	ReasonProviderError       Reason = "provider.error"
	ReasonProviderMissing     Reason = "provider.missing"
	ReasonProviderExitLied    Reason = "provider.exit_after_success"
	// ReasonProviderMultipleResults: the stream held more than one result
	// event, so which one decides the attempt is unclear.
	ReasonProviderMultipleResults Reason = "provider.multiple_results"
	// ReasonProviderWritable: the CLI lies where a sandboxed step can
	// write, so kusaw does not run it (not even its --version).
	ReasonProviderWritable   Reason = "provider.writable_cli"
	ReasonWorktreeFailed     Reason = "worktree.failed"
	ReasonWorktreeDirty      Reason = "worktree.dirty_repo"
	ReasonCommitFailed       Reason = "worktree.commit_failed"
	ReasonEgressBudget       Reason = "egress.budget"
	ReasonEgressLeaseFailed  Reason = "egress.lease_failed"
	ReasonEgressBridgeFailed Reason = "egress.bridge_failed"
	// ReasonEgressUpstreamUntrusted: inject's upstream (the provider's
	// base_url) presented a certificate kusaw's proxy does not trust.
	ReasonEgressUpstreamUntrusted Reason = "egress.upstream_untrusted"
	ReasonSecretMissing           Reason = "secret.missing"
	ReasonRunInterrupted          Reason = "run.interrupted"
	ReasonRunCanceled             Reason = "run.canceled"
	ReasonInternal                Reason = "kusaw.internal"
	ReasonStateWriteFailed        Reason = "state.write_failed"
	ReasonLost                    Reason = "lost"
	ReasonMergeConflict           Reason = "merge_conflict"
	ReasonLimitReached            Reason = "limit_reached"
	ReasonResourceLimit           Reason = "resource_limit"
	ReasonGateRejected            Reason = "gate_rejected"
	ReasonGateTimeout             Reason = "gate_timeout"
	ReasonDeliverFailed           Reason = "deliver.failed"
)

// Reasons lists every reason code with its message and fix. The reference
// page docs/reference/statuses.md is generated from this table.
var Reasons = []ReasonInfo{
	{ReasonStepExitNonzero, "the step's process exited with a non-zero status", "read the attempt's stderr.log (kusaw logs RUN --step STEP)"},
	{ReasonStepTimeout, "the step ran longer than its timeout", "raise steps.<id>.timeout or make the step faster"},
	{ReasonStepCanceled, "the run was canceled while the step ran", "start the run again when ready"},
	{ReasonStepStartFailed, "the step's process could not be started", "check that the command exists and is executable (steps.<id>.run or the provider's command)"},
	{ReasonSetupFailed, "a setup command failed in a new worktree", "fix the command under setup; it runs outside the sandbox in each worktree"},
	{ReasonSandboxUnavailable, "the sandbox backend is not available on this machine and the attempt requires it", "run `kusaw sandbox check` and follow its fix, or set the step's sandbox to off"},
	{ReasonSandboxUntrusted, "the sandbox binary is not in a root-owned, non-world-writable system directory", "install bubblewrap from the system's packages (apt-get install bubblewrap)"},
	{ReasonSandboxNoUserNS, "unprivileged user namespaces do not work here, so bubblewrap cannot start", "allow them (sysctl kernel.unprivileged_userns_clone=1, or the AppArmor profile for bwrap) or run where they are allowed"},
	{ReasonSandboxTokenMissing, "a sandboxed agent step has no login token and a fresh HOME", "kusaw config set steps.<id>.env.CLAUDE_CODE_OAUTH_TOKEN --secret (or CURSOR_API_KEY)"},
	{ReasonSandboxPlanRefused, "the sandbox plan cannot be built safely (a protected path is a symlink out of the worktree, a refused allow_write entry)", "remove the offending link or path named in the message"},
	{ReasonProviderNoResult, "the agent CLI ended without a result event", "read stdout.log; the CLI may have crashed or been killed"},
	{ReasonProviderError, "the agent CLI reported an error result (is_error)", "read the result event in the attempt's events; a rate limit or login problem is common"},
	{ReasonProviderMissing, "the provider's CLI is not installed or not on PATH", "install it, or set providers.<name>.command to its path"},
	{ReasonProviderExitLied, "the agent reported success but its process exited non-zero", "read stderr.log; the CLI failed after finishing its work"},
	{ReasonProviderMultipleResults, "the agent CLI printed more than one result event, so it is unclear which one decides", "read stdout.log; a wrapper script or a second agent writing to the same output is the usual cause"},
	{ReasonProviderWritable, "the agent CLI lies in a folder a sandboxed step can write (a login folder such as ~/.claude, the state folder, a cache, allow_write), so a step could have replaced it; kusaw does not run it", "install the CLI outside those folders (npm install -g, a system package), or point the provider's command in factory.yaml (providers: ... command:) at a copy outside them"},
	{ReasonWorktreeFailed, "a git worktree could not be created or removed", "run `git worktree prune` in the repository and check its base ref exists"},
	{ReasonWorktreeDirty, "the repository's main checkout has uncommitted changes; kusaw does not touch it", "commit or stash the changes in the repository, then run again"},
	{ReasonCommitFailed, "the attempt's changes could not be committed on its branch", "read the attempt's events; check git's user.name/user.email and hooks"},
	{ReasonEgressBudget, "an egress byte budget was reached; further connections were refused", "raise sandbox.egress.budgets or find out why the step sent so much"},
	{ReasonEgressLeaseFailed, "the egress proxy could not give the attempt a lease", "check the state directory is writable and not on a filesystem without Unix sockets"},
	{ReasonEgressBridgeFailed, "the in-sandbox bridge could not hand its listener to the proxy", "run `kusaw sandbox doctor` (probe P5) for details"},
	{ReasonEgressUpstreamUntrusted, "the provider's upstream (its base_url) presented a certificate kusaw's proxy does not trust, so the key was not sent and the agent was told to stop", "set providers.PROVIDER.ca_file to the PEM file of the CA that signed the upstream's certificate (or give the upstream one from a CA the system trusts), then run again"},
	{ReasonSecretMissing, "a secret the step needs is not in the secret store", "kusaw config set KEY --secret (the message names the KEY)"},
	{ReasonRunInterrupted, "kusaw stopped while the run was running", "start the run again (or set serve.resume: true)"},
	{ReasonRunCanceled, "the run was canceled", "start the run again when ready"},
	{ReasonInternal, "kusaw hit an internal error", "report it with the attempt's events.jsonl"},
	{ReasonStateWriteFailed, "a record of the attempt (its output, events, attempt.json or egress.log) could not be written, so kusaw ended it; the message names the file", "free space on the file system of the state folder (df -h; the fix in attempt.json names the folder) or raise its quota, then run the step again; what was sealed before the failure still verifies (kusaw log verify)"},
	{ReasonLost, "the worker running the attempt stopped answering (killed, machine gone, network cut); the infrastructure failed, not the step, so the attempt does not count against the step's attempts and is dispatched again", "see kusaw workers; check the worker's machine and its network to serve"},
	{ReasonMergeConflict, "the commits of a parallel group's members conflict when merged into the run branch", "give the group a resolve step, or change the steps so they touch different files; every member's branch is kept"},
	{ReasonLimitReached, "a limit of the step or the pipeline was crossed (cost, tokens, turns or duration); the message names it", "raise the limit under limits:, or make the step cheaper"},
	{ReasonResourceLimit, "the attempt reached a resource limit of its sandbox (processes, memory, disk or output); the message names it", "raise sandbox.resources.<limit> for the step, or find out why it needs so much"},
	{ReasonGateRejected, "a person rejected the run at an approval gate", "read the rejection's reason in the run's events; start a new run when ready"},
	{ReasonGateTimeout, "nobody approved the gate before its timeout", "approve sooner (kusaw approve RUN), or raise the gate's timeout"},
	{ReasonDeliverFailed, "delivering the run's work (merge, push or pull request) failed; the run itself still succeeded", "read the deliver.* events, fix the cause, then kusaw deliver RUN"},
}

// Info returns the message and fix of a reason code.
func (r Reason) Info() ReasonInfo {
	for _, i := range Reasons {
		if i.Code == r {
			return i
		}
	}
	return ReasonInfo{Code: r, Message: string(r), Fix: ""}
}

// Error is an error that carries a reason code, a specific message and a fix.
type Error struct {
	Reason Reason
	Msg    string
	Fix    string
}

func (e *Error) Error() string {
	if e.Fix != "" {
		return fmt.Sprintf("%s: %s (fix: %s)", e.Reason, e.Msg, e.Fix)
	}
	return fmt.Sprintf("%s: %s", e.Reason, e.Msg)
}

// Errorf builds an *Error with the reason's default fix.
func Errorf(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...), Fix: r.Info().Fix}
}

// placeholders are the words in capitals a fix in the table stands for a
// value with.
var placeholders = []string{"RUN", "STEP", "KEY", "HOST", "PROVIDER"}

// Fill puts the values kusaw knows into a fix's placeholders (RUN, STEP,
// KEY, HOST, PROVIDER: each a whole word, letters, digits and _ counting
// as a word's); a placeholder without a value stays, so the table's text
// is still readable. Without regexp, so that this leaf adds none to what
// kusaw sandbox exec initialises (cmd/kusaw/early).
func Fill(fix string, known map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(fix); {
		j := i
		for j < len(fix) && isWordByte(fix[j]) {
			j++
		}
		if j == i {
			b.WriteByte(fix[i])
			i++
			continue
		}
		w := fix[i:j]
		if v := known[w]; v != "" && slices.Contains(placeholders, w) {
			w = v
		}
		b.WriteString(w)
		i = j
	}
	return b.String()
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// SecretStoreFix is the fix when the secret store cannot be opened at all
// (no key is known then).
const SecretStoreFix = "set KUSAW_SECRETS_DIR to the secret store's folder (or HOME, whose .config/kusaw holds it), readable by this user; kusaw secrets list names it"
