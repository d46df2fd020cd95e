package providers

import (
	"fmt"
	"strings"

	"github.com/kusaw/kusaw/status"
)

// TokenNeed says whether an agent attempt must carry a login token in its
// environment, and which names satisfy it.
type TokenNeed struct {
	Provider string
	Step     string
	Required bool
	EnvNames []string // any one of them, set in steps.<id>.env (as a secret)
	Fix      string   // the command that fixes a missing token
}

// FreshHome reports whether kusaw's sandbox gives the attempt a fresh,
// empty HOME on this OS: on macOS it does (the real agent folders are not
// mounted and the Keychain is unreachable); on Linux it mounts the agent's
// login folders instead. The engine may pass true to NeedsToken whenever
// its plan gives a fresh HOME.
func FreshHome(goos string, sandboxed bool) bool {
	return sandboxed && goos == "darwin"
}

// NeedsToken tells whether an attempt of step must bring its own login
// token. Only a fresh HOME requires one. With inject the egress proxy adds
// the API key itself, so a provider that supports inject needs none.
func NeedsToken(provider, step string, freshHome, inject bool) TokenNeed {
	p, ok := Get(provider)
	if !ok {
		return TokenNeed{Provider: provider, Step: step}
	}
	return needsToken(p, step, freshHome, inject)
}

// NeedsTokenOf is NeedsToken for a provider already looked up (one the
// factory describes).
func NeedsTokenOf(p Provider, step string, freshHome, inject bool) TokenNeed {
	return needsToken(p, step, freshHome, inject)
}

func needsToken(p Provider, step string, freshHome, inject bool) TokenNeed {
	provider := p.Name()
	n := TokenNeed{Provider: provider, Step: step}
	spec := p.Spec()
	n.EnvNames = append([]string(nil), spec.Env.LoginToken...)
	if len(n.EnvNames) > 0 {
		n.Fix = fmt.Sprintf("kusaw config set steps.%s.env.%s --secret", stepName(step), n.EnvNames[0])
		if provider == "claude-code" {
			n.Fix = "run `claude setup-token`, then " + n.Fix + " (or ANTHROPIC_API_KEY)"
		}
	}
	n.Required = freshHome && len(n.EnvNames) > 0 && !(inject && spec.Inject != nil)
	return n
}

// Satisfied reports whether the step's env (the names it sets, secrets
// included) holds one of the token names, or no token is needed.
func (n TokenNeed) Satisfied(stepEnv []string) bool {
	if !n.Required {
		return true
	}
	for _, have := range stepEnv {
		name, _, _ := strings.Cut(have, "=")
		for _, want := range n.EnvNames {
			if name == want {
				return true
			}
		}
	}
	return false
}

// Err is the refusal of an attempt whose token is missing (nil when
// satisfied by stepEnv).
func (n TokenNeed) Err(stepEnv []string) *status.Error {
	if n.Satisfied(stepEnv) {
		return nil
	}
	return &status.Error{
		Reason: status.ReasonSandboxTokenMissing,
		Msg: fmt.Sprintf("step %s: the %s CLI gets a fresh HOME in the sandbox and no login token: set %s",
			stepName(n.Step), n.Provider, strings.Join(n.EnvNames, " or ")),
		Fix: n.Fix,
	}
}

func stepName(s string) string {
	if s == "" {
		return "<id>"
	}
	return s
}
