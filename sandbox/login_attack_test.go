package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	userLogin = `{"claudeAiOauth":{"accessToken":"user-a1","refreshToken":"user-r1","expiresAt":1700000000000,"scopes":["user:inference","user:profile"],"subscriptionType":"max","accountUuid":"acc-user","organizationUuid":"org-user"},"mcpOAuth":{"srv":{"accessToken":"m"}}}`
	// userRefreshed is what Claude Code's refresh makes of userLogin: new
	// tokens, a later expiry, nothing else.
	userRefreshed = `{"claudeAiOauth":{"accessToken":"user-a2","refreshToken":"user-r2","expiresAt":1700003600000,"scopes":["user:inference","user:profile"],"subscriptionType":"max","accountUuid":"acc-user","organizationUuid":"org-user"},"mcpOAuth":{"srv":{"accessToken":"m"}}}`
	// attackerLogin is another account's login of the same shape, the
	// labels copied from the user's.
	attackerLogin = `{"claudeAiOauth":{"accessToken":"evil-a","refreshToken":"evil-r","expiresAt":1700003600000,"scopes":["user:inference","user:profile"],"subscriptionType":"max","accountUuid":"acc-user","organizationUuid":"org-user"},"mcpOAuth":{"srv":{"accessToken":"m"}}}`
)

func reachedHosts(hosts ...string) func(string) bool {
	return func(h string) bool {
		for _, x := range hosts {
			if x == h {
				return true
			}
		}
		return false
	}
}

// carryCase writes the user's file and the step's, carries back, and
// returns the outcome and the user's file after it.
func carryCase(t *testing.T, user, step string, rule *CredentialRule, reached func(string) bool) (*CredentialOutcome, string) {
	t.Helper()
	dir := t.TempDir()
	to, from := filepath.Join(dir, "user.json"), filepath.Join(dir, "step.json")
	write(t, to, user)
	os.Chmod(to, 0o600)
	write(t, from, step)
	out, err := carryBack(from, to, rule, reached)
	if err != nil {
		t.Fatalf("carryBack: %v", err)
	}
	b, _ := os.ReadFile(to)
	return out, string(b)
}

// The attack: a prompt-injected step writes another account's tokens, of
// the same shape, into its login copy's credentials file; carried back,
// the user's later sessions would run as that account. Without a
// connection to the CLI's token host during the step no refresh can have
// happened: the user's file is kept and the outcome says why (also with
// no egress log at all, network: open). The twin: the same change from a
// real refresh, the token host reached, is carried back, 0600.
func TestCarryBackRefusesASwapWithoutTheTokenHost(t *testing.T) {
	rule := &testClaudeRule
	for name, reached := range map[string]func(string) bool{
		"no connection to the token host": reachedHosts("api.anthropic.com", "claude.ai"),
		"no egress log":                   nil,
	} {
		for _, step := range []string{attackerLogin, userRefreshed} {
			out, got := carryCase(t, userLogin, step, rule, reached)
			if got != userLogin {
				t.Errorf("%s: the user's login was replaced: %s", name, got)
			}
			if out == nil || out.Carried || !strings.Contains(out.Reason, "platform.claude.com or console.anthropic.com") || strings.Contains(out.Reason, "evil") {
				t.Errorf("%s: outcome %+v", name, out)
			}
		}
	}
	out, got := carryCase(t, userLogin, userRefreshed, rule, reachedHosts("api.anthropic.com", "platform.claude.com"))
	if got != userRefreshed || out == nil || !out.Carried || out.Host != "platform.claude.com" {
		t.Fatalf("the refresh was not carried back: %+v %s", out, got)
	}
	dir := t.TempDir()
	to, from := filepath.Join(dir, "user.json"), filepath.Join(dir, "step.json")
	write(t, to, userLogin)
	write(t, from, userRefreshed)
	os.Chmod(from, 0o644)
	if _, err := carryBack(from, to, rule, reachedHosts("console.anthropic.com")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(to); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("the carried-back file: %v %v", fi.Mode(), err)
	}
}

// With the token host reached (an agent allowed to reach it, or a real
// refresh beside the swap), a file that changes more than a refresh does
// is still refused: the account, organisation, scopes or subscription, a
// key added or removed, the expiry not moved forward, a token that is
// not a string, a login where the user had none, a CLI without a rule.
func TestCarryBackRefusesMoreThanARefresh(t *testing.T) {
	reached := reachedHosts("platform.claude.com")
	swap := func(old, new string) string {
		if !strings.Contains(userRefreshed, old) {
			t.Fatalf("%s not in the refreshed login", old)
		}
		return strings.Replace(userRefreshed, old, new, 1)
	}
	for name, c := range map[string]struct{ step, why string }{
		"account":        {swap(`"acc-user"`, `"acc-evil"`), "changes /claudeAiOauth/accountUuid"},
		"organisation":   {swap(`"org-user"`, `"org-evil"`), "changes /claudeAiOauth/organizationUuid"},
		"scopes":         {swap(`["user:inference","user:profile"]`, `["user:inference"]`), "changes /claudeAiOauth/scopes"},
		"subscription":   {swap(`"max"`, `"pro"`), "changes /claudeAiOauth/subscriptionType"},
		"mcp login":      {swap(`{"accessToken":"m"}`, `{"accessToken":"evil"}`), "changes /mcpOAuth/srv/accessToken"},
		"new key":        {swap(`"mcpOAuth"`, `"planted":1,"mcpOAuth"`), "adds /planted"},
		"new inner key":  {swap(`"accountUuid"`, `"apiKey":"k","accountUuid"`), "adds /claudeAiOauth/apiKey"},
		"removed key":    {swap(`,"organizationUuid":"org-user"`, ``), "removes /claudeAiOauth/organizationUuid"},
		"emptied":        {`{}`, "removes /claudeAiOauth"},
		"expiry back":    {swap(`1700003600000`, `1600000000000`), "without moving /claudeAiOauth/expiresAt forward"},
		"expiry same":    {swap(`1700003600000`, `1700000000000`), "without moving /claudeAiOauth/expiresAt forward"},
		"expiry a word":  {swap(`1700003600000`, `"soon"`), "/claudeAiOauth/expiresAt: not a time"},
		"only expiry":    {strings.NewReplacer(`"user-a1"`, `"user-a1"`).Replace(strings.Replace(strings.Replace(userRefreshed, `"user-a2"`, `"user-a1"`, 1), `"user-r2"`, `"user-r1"`, 1)), "but no token"},
		"token a number": {swap(`"user-a2"`, `42`), "makes /claudeAiOauth/accessToken something other than a token"},
		"token emptied":  {swap(`"user-a2"`, `""`), "makes /claudeAiOauth/accessToken something other than a token"},
	} {
		out, got := carryCase(t, userLogin, c.step, &testClaudeRule, reached)
		if got != userLogin {
			t.Errorf("%s: the user's login was replaced: %s", name, got)
		}
		if out == nil || out.Carried || !strings.Contains(out.Reason, c.why) {
			t.Errorf("%s: outcome %+v, want %q", name, out, c.why)
		}
		if out != nil && (strings.Contains(out.Reason, "evil") || strings.Contains(out.Reason, "user-a")) {
			t.Errorf("%s: the reason holds a value: %s", name, out.Reason)
		}
	}
	if out, got := carryCase(t, userLogin, userRefreshed, nil, reached); got != userLogin || out == nil || !strings.Contains(out.Reason, "knows no refresh") {
		t.Errorf("no rule: %+v %s", out, got)
	}
	// A login where the user had none is never planted.
	dir := t.TempDir()
	none, planted := filepath.Join(dir, "none.json"), filepath.Join(dir, "planted.json")
	write(t, planted, attackerLogin)
	if out, err := carryBack(planted, none, &testClaudeRule, reached); err != nil || exists(none) || out == nil || out.Carried {
		t.Errorf("a login the user did not have was planted (%+v, %v)", out, err)
	}
	// Unchanged, or only written another way: nothing to carry, nothing said.
	for _, same := range []string{userLogin, strings.ReplaceAll(userLogin, ",", ", ")} {
		if out, got := carryCase(t, userLogin, same, &testClaudeRule, reached); out != nil || got != userLogin {
			t.Errorf("an unchanged login: %+v %s", out, got)
		}
	}
}

// Codex's auth.json: the refresh replaces its three tokens and moves
// last_refresh (an RFC 3339 time) forward; its account_id stays.
func TestCarryBackCodexRefresh(t *testing.T) {
	rule := &CredentialRule{Name: "auth.json", Hosts: []string{"auth.openai.com"},
		Tokens: []string{"/tokens/id_token", "/tokens/access_token", "/tokens/refresh_token"}, Expiry: []string{"/last_refresh"}}
	const user = `{"OPENAI_API_KEY":null,"tokens":{"id_token":"i1","access_token":"a1","refresh_token":"r1","account_id":"acc"},"last_refresh":"2026-11-01T10:00:00.5Z"}`
	refreshed := strings.NewReplacer(`"i1"`, `"i2"`, `"a1"`, `"a2"`, `"r1"`, `"r2"`, `2026-11-01T10:00:00.5Z`, `2026-12-02T05:00:00Z`).Replace(user)
	if out, got := carryCase(t, user, refreshed, rule, reachedHosts("auth.openai.com")); !out.Carried || got != refreshed {
		t.Errorf("the refresh was not carried back: %+v", out)
	}
	other := strings.Replace(refreshed, `"acc"`, `"acc-evil"`, 1)
	if out, got := carryCase(t, user, other, rule, reachedHosts("auth.openai.com")); out.Carried || got != user || !strings.Contains(out.Reason, "/tokens/account_id") {
		t.Errorf("another account was carried back: %+v", out)
	}
	if out, got := carryCase(t, user, refreshed, rule, reachedHosts("chatgpt.com")); out.Carried || got != user {
		t.Errorf("carried back without the token host: %+v", out)
	}
}

// Only a credentials file of the expected shape is carried back, onto
// one: a link, a FIFO, a file over 64 KiB, a script or a JSON array in
// its place is refused (the outcome says so), the token host reached.
func TestCarryBackRefusesOddCredentials(t *testing.T) {
	dir := t.TempDir()
	orig := filepath.Join(dir, "orig.json")
	write(t, orig, userLogin)
	reached := reachedHosts("platform.claude.com")
	for name, mk := range map[string]func(p string){
		"symlink":  func(p string) { os.Symlink(filepath.Join(dir, "refreshed"), p) },
		"not json": func(p string) { write(t, p, "#!/bin/sh\nevil\n") },
		"array":    func(p string) { write(t, p, "[1,2]") },
		"too big": func(p string) {
			write(t, p, strings.Replace(userRefreshed, `"m"`, `"`+strings.Repeat("x", 70<<10)+`"`, 1))
		},
		"fifo": func(p string) { syscall.Mkfifo(p, 0o600) },
	} {
		write(t, filepath.Join(dir, "refreshed"), userRefreshed)
		from := filepath.Join(dir, "from-"+strings.ReplaceAll(name, " ", "-"))
		mk(from)
		out, err := carryBack(from, orig, &testClaudeRule, reached)
		if err != nil || out == nil || out.Carried || !strings.Contains(out.Reason, "the step's file is not") {
			t.Errorf("%s: %+v %v", name, out, err)
		}
		if b, _ := os.ReadFile(orig); string(b) != userLogin {
			t.Fatalf("%s: the user's credentials changed: %q", name, b)
		}
	}
	// The user's own file a link: not written through.
	target := filepath.Join(dir, "elsewhere.json")
	write(t, target, userLogin)
	link := filepath.Join(dir, "link.json")
	os.Symlink(target, link)
	from := filepath.Join(dir, "good")
	write(t, from, userRefreshed)
	if out, err := carryBack(from, link, &testClaudeRule, reached); err != nil || out == nil || out.Carried {
		t.Errorf("carried back through the user's link: %+v %v", out, err)
	}
	if b, _ := os.ReadFile(target); string(b) != userLogin {
		t.Errorf("written through the link: %s", b)
	}
	if out, err := carryBack(from, orig, &testClaudeRule, reached); err != nil || !out.Carried {
		t.Fatalf("a good credentials file was not carried back: %+v %v", out, err)
	}
	if b, _ := os.ReadFile(orig); string(b) != userRefreshed {
		t.Errorf("a good credentials file was not carried back: %q", b)
	}
}
