package config

import (
	"fmt"
	"sort"
)

// Severity of a finding.
type Severity string

const (
	SevError   Severity = "error"
	SevWarning Severity = "warning"
)

// Finding is one validation error or warning, with where it is and how to
// fix it. Codes are stable: scripts and docs may rely on them.
type Finding struct {
	Code     string   `json:"code"`
	Severity Severity `json:"-"`
	Path     string   `json:"path"`
	Line     int      `json:"line"`
	Column   int      `json:"column"`
	Message  string   `json:"message"`
	Fix      string   `json:"fix"`
	File     string   `json:"-"`
}

// String is the one-line human form: file:line:col: code: message (fix: ...).
func (f Finding) String() string {
	loc := f.File
	if f.Line > 0 {
		loc = fmt.Sprintf("%s:%d:%d", f.File, f.Line, f.Column)
	}
	s := fmt.Sprintf("%s: %s %s: %s", loc, f.Severity, f.Code, f.Message)
	if f.Fix != "" {
		s += " (fix: " + f.Fix + ")"
	}
	return s
}

// Codes of findings. Errors start with E, warnings with W. The table in
// CodeInfo is the reference; docs/reference/validation.md is generated from it.
const (
	ECodeSyntax          = "E001"
	ECodeUnknownKey      = "E002"
	ECodeType            = "E003"
	ECodeMissing         = "E004"
	ECodeVersion         = "E005"
	ECodeDuplicate       = "E006"
	ECodeBadValue        = "E007"
	ECodeUnknownRepo     = "E010"
	ECodeUnknownStep     = "E011"
	ECodeUnknownProvider = "E012"
	ECodeUnknownBuiltin  = "E013"
	ECodeUnknownCap      = "E014"
	ECodeBadDuration     = "E020"
	ECodeBadSize         = "E021"
	ECodeBadName         = "E022"
	ECodePathMissing     = "E030"
	ECodeNotGitRepo      = "E031"
	ECodeAllowWrite      = "E032"
	ECodeHostRefused     = "E040"
	ECodeBadCIDR         = "E041"
	ECodeBadAddress      = "E042"
	ECodeBadURL          = "E043"
	ECodeBadNatsURL      = "E044"
	ECodeUpstreamProxy   = "E045"
	ECodeNatsAccount     = "E046"
	ECodeNatsCA          = "E047"
	ECodeProviderCA      = "E048"
	ECodeStepKind        = "E050"
	ECodeNoPrompt        = "E051"
	ECodeProviderModel   = "E052"
	ECodeInjectNeedsList = "E060"
	ECodeNetworkOpen     = "E061"
	ECodeCapMissing      = "E062"
	ECodeEmptyPipeline   = "E070"
	ECodeNoPipelines     = "E071"
	ECodeGroup           = "E072"
	ECodeShape           = "E080"
	ECodeRetry           = "E081"
	ECodeGate            = "E082"
	ECodeTrigger         = "E090"
	ECodeForge           = "E091"
	ECodeAgent           = "E092"
	ECodeRetention       = "E100"
	ECodeSparse          = "E101"
	ECodeWriteLayer      = "E102"

	WCodeProxyIgnored      = "W1"
	WCodeNoRestriction     = "W2"
	WCodeHandshake         = "W3"
	WCodeTokenMissing      = "W4"
	WCodeUnusedStep        = "W5"
	WCodeSecretMissing     = "W6"
	WCodeEnvProxy          = "W7"
	WCodeRetryOnce         = "W10"
	WCodeResolveUnused     = "W11"
	WCodeUnsandboxedAfter  = "W12"
	WCodePoolNeverOffered  = "W13"
	WCodeCacheUnsandboxed  = "W14"
	WCodeToolchain         = "W15"
	WCodePromptPlaceholder = "W16"
)

// CodeInfo describes every finding code.
var CodeInfo = []struct{ Code, Meaning string }{
	{ECodeSyntax, "the file is not valid YAML"},
	{ECodeUnknownKey, "a key that the factory file does not have (often a typo)"},
	{ECodeType, "a value of the wrong type (a list where a string is expected, ...)"},
	{ECodeMissing, "a required key is missing"},
	{ECodeVersion, "version is missing or not 1"},
	{ECodeDuplicate, "the same key or id twice"},
	{ECodeBadValue, "a value outside its allowed set (mode, network, ...)"},
	{ECodeUnknownRepo, "a reference to a repo that repos does not define"},
	{ECodeUnknownStep, "a pipeline names a step that steps does not define"},
	{ECodeUnknownProvider, "a provider kusaw does not know"},
	{ECodeUnknownBuiltin, "a built-in step kusaw does not have"},
	{ECodeUnknownCap, "requires names an unknown capability"},
	{ECodeBadDuration, "not a Go duration such as 45m or 1h30m"},
	{ECodeBadSize, "not a size such as 512MiB or 2GiB"},
	{ECodeBadName, "an id or environment variable name with characters it may not have"},
	{ECodePathMissing, "a path that does not exist"},
	{ECodeNotGitRepo, "a repo path that is not a git repository"},
	{ECodeAllowWrite, "an allow_write entry kusaw refuses (/, system directories, the home or above, credential folders)"},
	{ECodeHostRefused, "an allowlist entry kusaw refuses (IP literal, bare *, public-suffix wildcard, metadata name)"},
	{ECodeBadCIDR, "allow_ranges entry that is not a CIDR"},
	{ECodeBadAddress, "resolver or listen address that is not host:port"},
	{ECodeBadURL, "base_url that is not an http(s) URL, or one inject forwards a key to that is not https:// (or has credentials, a query or a fragment)"},
	{ECodeBadNatsURL, "serve.cluster.nats_url that is not a nats:// or tls:// URL, or set beside serve.cluster.listen"},
	{ECodeUpstreamProxy, "sandbox.egress.upstream_proxy that is not an http:// or https:// proxy address (host and port, no path; credentials only through {secret: KEY})"},
	{ECodeNatsAccount, "serve.cluster.nats_url without account or signing_key, an account that is not an account's public nkey (A...), a signing_key not given as {secret: KEY}, or account, signing_key, ca or replicas without nats_url"},
	{ECodeNatsCA, "serve.cluster.ca that cannot be read or is not a PEM file of certificates"},
	{ECodeProviderCA, "providers.NAME.ca_file that cannot be read or is not a PEM file of certificates"},
	{ECodeStepKind, "a step that is more than one of agent, builtin and run"},
	{ECodeNoPrompt, "an agent step without prompt or prompt_file, or with both"},
	{ECodeProviderModel, "an agent step whose provider has no model of its own to fall back on (opencode) without providers.NAME.model"},
	{ECodeInjectNeedsList, "inject without network: allowlist (there is no proxy to hold the key)"},
	{ECodeNetworkOpen, "a step requires network while its network is open"},
	{ECodeCapMissing, "a step requires a capability its provider or mode does not support"},
	{ECodeEmptyPipeline, "a pipeline with no steps"},
	{ECodeNoPipelines, "no pipelines defined"},
	{ECodeGroup, "a parallel group with fewer than two steps, a step named twice in one group, or a step in two groups of one pipeline"},
	{ECodeShape, "a pipeline shape that cannot run as written: select without candidates, on_failure or resolve naming the step itself, candidates with on_failure, resolve off a group's first step"},
	{ECodeRetry, "a retry.on entry that is not an outcome kusaw retries on, or an exit code outside 1 to 255"},
	{ECodeGate, "a gate without a message, or on a step with per_repo, candidates, or in a parallel group"},
	{ECodeTrigger, "a trigger that cannot fire or names what does not exist: no on:, an unknown pipeline, a schedule that is not cron, a template field no event has, a GitLab or Gitea trigger without allow:"},
	{ECodeForge, "an unknown forge, a forge without api_url, or a trigger on a forge whose webhook_secret is not set"},
	{ECodeAgent, "a providers.NAME.agent block kusaw cannot run: a built-in name, argv without {prompt} or {prompt_file}, a stream without its result pointer, a login folder outside the CLI's own, inject without the CLI's key and base URL variables"},
	{ECodeRetention, "retention: that names no bound, a max_runs below 1, or a max_age under an hour"},
	{ECodeSparse, "a repos.NAME.sparse that lists no folder, or an entry that is not a plain folder path inside the repository (no .., no leading /, no glob characters, no .git)"},
	{ECodeWriteLayer, "a repos.NAME.write_layer: overlay where no attempt on the repo runs in bwrap (not Linux, or every attempt's sandbox off), or on a sparse repo"},
	{WCodeProxyIgnored, "allowlist mode with a tool known to ignore HTTP(S)_PROXY: it will fail closed"},
	{WCodeNoRestriction, "network: allowlist on an attempt whose sandbox is off: nothing is restricted"},
	{WCodeHandshake, "a provider's handshake hosts (login, telemetry) are not in the allowlist"},
	{WCodeTokenMissing, "a sandboxed agent step with a fresh HOME has no login token secret"},
	{WCodeUnusedStep, "a step no pipeline uses"},
	{WCodeSecretMissing, "a secret the file references is not in the secret store"},
	{WCodeEnvProxy, "kusaw's environment sets HTTPS_PROXY (or HTTP_PROXY) but the factory sets no sandbox.egress.upstream_proxy: kusaw's proxy never reads it and dials hosts directly"},
	{WCodeRetryOnce, "retry rules on a step with one attempt: nothing is retried"},
	{WCodeResolveUnused, "resolve on a step that runs alone: there is nothing to merge"},
	{WCodeUnsandboxedAfter, "a step that runs outside the sandbox comes after a sandboxed step: it runs, on the host, code the sandboxed step may have written"},
	{WCodeCacheUnsandboxed, "a cache a sandboxed step writes is used by a step outside the sandbox: that step runs, on the host, what the sandboxed one left in it"},
	{WCodeToolchain, "the Linux sandbox shows a toolchain folder of a sandboxed step's PATH (outside the system folders) read-only: name it in allow_read to say it is meant"},
	{WCodePoolNeverOffered, "a step's pool that no worker has ever offered, or that no worker's join token allows (or a pool without serve.cluster): its attempts would wait"},
	{WCodePromptPlaceholder, "an agent step's prompt is still the placeholder kusaw init wrote: the agent would be asked to describe a change, not make one"},
}

// Findings is a list of findings with helpers.
type Findings []Finding

// Errors returns the error findings.
func (fs Findings) Errors() Findings { return fs.filter(SevError) }

// Warnings returns the warning findings.
func (fs Findings) Warnings() Findings { return fs.filter(SevWarning) }

func (fs Findings) filter(s Severity) Findings {
	out := Findings{}
	for _, f := range fs {
		if f.Severity == s {
			out = append(out, f)
		}
	}
	return out
}

// Sort orders findings by position, then code.
func (fs Findings) Sort() {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Line != fs[j].Line {
			return fs[i].Line < fs[j].Line
		}
		if fs[i].Column != fs[j].Column {
			return fs[i].Column < fs[j].Column
		}
		return fs[i].Code < fs[j].Code
	})
}
