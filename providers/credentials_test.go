package providers

import (
	"path"
	"slices"
	"strings"
	"testing"
)

// Each credentials rule names a token host the CLI is known to use (one
// of its listed hosts, so an allowlist can admit it) and JSON pointers;
// the CLIs kusaw carries a refreshed login back for have one, and those
// whose refresh kusaw does not know (Gemini's oauth_creds.json is never
// carried back; opencode runs on an API key) have none.
func TestCredentialRules(t *testing.T) {
	for _, name := range []string{"claude-code", "codex", "cursor", "gemini", "opencode"} {
		p, ok := Get(name)
		if !ok {
			t.Fatalf("no provider %s", name)
		}
		s := p.Spec()
		want := name == "claude-code" || name == "codex" || name == "cursor"
		if (len(s.Credentials) > 0) != want {
			t.Errorf("%s: credentials rules %+v", name, s.Credentials)
		}
		for _, c := range s.Credentials {
			if c.File == "" || c.File != path.Base(c.File) || len(c.TokenHosts) == 0 || len(c.Tokens) == 0 {
				t.Errorf("%s: rule %+v", name, c)
			}
			for _, h := range c.TokenHosts {
				if !slices.Contains(s.HandshakeHosts, h) && !slices.ContainsFunc(append(s.EgressHosts, s.HandshakeHosts...), func(p string) bool {
					return strings.HasPrefix(p, "*.") && strings.HasSuffix(h, p[1:])
				}) {
					t.Errorf("%s: token host %s is none of its listed hosts", name, h)
				}
			}
			for _, f := range append(append([]string(nil), c.Tokens...), c.Expiry...) {
				if !strings.HasPrefix(f, "/") {
					t.Errorf("%s: %s is not a JSON pointer", name, f)
				}
			}
		}
	}
	if c := claudeSpec.Credentials[0]; c.File != ".credentials.json" || c.TokenHosts[0] != "platform.claude.com" {
		t.Errorf("claude-code: %+v", c)
	}
}
