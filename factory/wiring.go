package factory

import (
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
)

// agentSpec fills an agent step's argv through its provider.
func (a *attemptRun) agentSpec(spec *steps.Spec, at steps.Attempt, p *preparedProc) error {
	return &status.Error{Reason: status.ReasonProviderMissing, Msg: "agent steps need the providers package, which this build lacks", Fix: "use a build of kusaw with providers"}
}

// sandboxed wraps process i in the sandbox backend.
func (a *attemptRun) sandboxed(i int, repos []string, spec *steps.Spec, env map[string]string, p *preparedProc) error {
	return &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: "this build of kusaw has no sandbox backend", Fix: status.ReasonSandboxUnavailable.Info().Fix}
}
