package providers

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/generated"
	"github.com/kusaw/kusaw/status"
)

var update = flag.Bool("update", false, "rewrite docs/reference/capabilities.md")

const capsPage = "../docs/reference/capabilities.md"

func TestCapabilitiesPageFresh(t *testing.T) {
	generated.CheckPage(t, capsPage, CapabilitiesMarkdown(), *update)
}

func level(t *testing.T, provider string, m Mode, c Capability) Level {
	t.Helper()
	cell, ok := CapabilitiesOf(provider, m).Get(c)
	if !ok {
		t.Fatalf("%s has no cell %s", provider, c)
	}
	if cell.Note == "" {
		t.Fatalf("%s %s: empty note", provider, c)
	}
	return cell.Level
}

func TestCapabilityLevels(t *testing.T) {
	off := Mode{Network: "open"}
	open := Mode{Sandboxed: true, Network: "open"}
	allow := Mode{Sandboxed: true, Network: "allowlist"}
	inject := Mode{Sandboxed: true, Network: "allowlist", Inject: true}
	mac := Mode{Sandboxed: true, Network: "allowlist", Inject: true, FreshHome: true}
	offAllow := Mode{Network: "allowlist"}
	tests := []struct {
		provider string
		m        Mode
		c        Capability
		want     Level
	}{
		{"claude-code", off, CapSandbox, NotSupported},
		{"claude-code", open, CapSandbox, Supported},
		{"claude-code", off, CapNetwork, NotSupported},
		{"claude-code", open, CapNetwork, NotSupported},
		{"claude-code", offAllow, CapNetwork, NotSupported},
		{"claude-code", allow, CapNetwork, Supported},
		{"claude-code", open, CapInject, NotSupported},
		{"claude-code", allow, CapInject, NotSupported},
		{"claude-code", inject, CapInject, Supported},
		{"cursor", inject, CapInject, NotSupported},
		{"cursor", allow, CapNetwork, Supported},
		{"claude-code", off, CapStreamEvents, Supported},
		{"cursor", off, CapStreamEvents, Supported},
		{"claude-code", off, CapResume, Supported},
		{"claude-code", mac, CapResume, NotSupported},
		{"claude-code", off, CapCostReporting, Supported},
		{"cursor", off, CapCostReporting, Partial},
	}
	for _, tc := range tests {
		if got := level(t, tc.provider, tc.m, tc.c); got != tc.want {
			t.Errorf("%s %+v %s = %s, want %s", tc.provider, tc.m, tc.c, got, tc.want)
		}
	}
	for _, name := range Names() {
		if n := len(CapabilitiesOf(name, off).Cells); n != len(Capabilities) {
			t.Errorf("%s: %d cells, want %d", name, n, len(Capabilities))
		}
	}
	if len(CapabilitiesOf("nope", off).Cells) != 0 {
		t.Error("unknown provider has capabilities")
	}
}

func TestUnmet(t *testing.T) {
	mx := CapabilitiesOf("claude-code", Mode{Sandboxed: true, Network: "open"})
	errs := mx.Unmet([]string{"sandbox", "network", "teleport"})
	if len(errs) != 2 {
		t.Fatalf("errs %v", errs)
	}
	var ue *UnmetError
	if !errors.As(errs[0], &ue) || ue.Capability != CapNetwork || !strings.Contains(errs[0].Error(), "network: allowlist") {
		t.Errorf("network error %q", errs[0])
	}
	if !strings.Contains(errs[1].Error(), `unknown capability "teleport"`) {
		t.Errorf("unknown error %q", errs[1])
	}
	if errs := CapabilitiesOf("claude-code", Mode{Sandboxed: true, Network: "allowlist", Inject: true}).Unmet([]string{"sandbox", "network", "inject", "cost_reporting"}); len(errs) != 0 {
		t.Errorf("fully capable mode: %v", errs)
	}
}

func TestNeedsToken(t *testing.T) {
	if FreshHome("linux", true) || !FreshHome("darwin", true) || FreshHome("darwin", false) {
		t.Fatal("FreshHome")
	}
	n := NeedsToken("claude-code", "plan", true, false)
	if !n.Required || n.EnvNames[0] != "CLAUDE_CODE_OAUTH_TOKEN" || n.EnvNames[1] != "ANTHROPIC_API_KEY" {
		t.Fatalf("need %+v", n)
	}
	if !strings.Contains(n.Fix, "kusaw config set steps.plan.env.CLAUDE_CODE_OAUTH_TOKEN --secret") {
		t.Fatalf("fix %q", n.Fix)
	}
	if n.Satisfied([]string{"GOFLAGS=-mod=mod"}) {
		t.Fatal("satisfied without a token")
	}
	err := n.Err([]string{"GOFLAGS"})
	if err == nil || err.Reason != status.ReasonSandboxTokenMissing || !strings.Contains(err.Error(), "kusaw config set steps.plan.env.CLAUDE_CODE_OAUTH_TOKEN --secret") {
		t.Fatalf("refusal %v", err)
	}
	if !n.Satisfied([]string{"ANTHROPIC_API_KEY"}) || !n.Satisfied([]string{"CLAUDE_CODE_OAUTH_TOKEN=x"}) || n.Err([]string{"ANTHROPIC_API_KEY"}) != nil {
		t.Fatal("token present but not satisfied")
	}
	if NeedsToken("claude-code", "plan", false, false).Required {
		t.Fatal("Linux sandbox mounts the login folders: no token needed")
	}
	if NeedsToken("claude-code", "plan", true, true).Required {
		t.Fatal("inject supplies the key: no token needed")
	}
	c := NeedsToken("cursor", "impl", true, true)
	if !c.Required || c.EnvNames[0] != "CURSOR_API_KEY" || c.Fix != "kusaw config set steps.impl.env.CURSOR_API_KEY --secret" {
		t.Fatalf("cursor need %+v (cursor cannot inject, so inject does not help)", c)
	}
	if NeedsToken("nope", "x", true, false).Required {
		t.Fatal("unknown provider requires a token")
	}
}
