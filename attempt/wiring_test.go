package attempt

import (
	"slices"
	"testing"

	"github.com/kusaw/kusaw/providers"
)

// Only the factory file's words of an agent's argv may name a file the
// sandbox shows: not the prompt, not the session id the previous
// attempt's agent reported (an agent could report a host path as its
// session id to have the next attempt see that file).
func TestFactoryWordsLeaveOutTheAgentsText(t *testing.T) {
	argv := []string{"/opt/agent/bin/claude", "-p", "--output-format", "stream-json", "--resume", "/srv/other/deploy.env",
		"--config", "/srv/factory/agent.json", "--", "/srv/other/secrets.env"}
	in := providers.PrepareInput{Args: []string{"--config", "/srv/factory/agent.json"},
		Agent: &providers.AgentDef{Argv: []string{"tool", "/srv/factory/wrapper.js", "{prompt}"}}}
	got := factoryWords(argv, in)
	want := []string{"/opt/agent/bin/claude", "--config", "/srv/factory/agent.json"}
	if !slices.Equal(got, want) {
		t.Fatalf("factoryWords = %q, want %q", got, want)
	}
	generic := []string{"tool", "/srv/factory/wrapper.js", "/srv/other/secrets.env"}
	if got := factoryWords(generic, in); !slices.Equal(got, []string{"tool", "/srv/factory/wrapper.js"}) {
		t.Fatalf("an agent definition's literal words: factoryWords = %q", got)
	}
}
