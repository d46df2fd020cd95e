package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// A step can write its login copy's credentials file, which kusaw carries
// back to the user's. A prompt-injected step could write another
// account's tokens there, of the same shape: the user's later sessions
// would then run as that account, and their prompts and code go to it.
// kusaw's proxy sees only which hosts a step connected to, never what a
// token endpoint answered, so it cannot check that a token was issued to
// the user. What it can check, and does, failing closed:
//
//   - a refresh could have happened: the step made a connection that got
//     an answer to a token endpoint host of the CLI (the attempt's egress
//     log; no proxy, as with network: open, shows nothing);
//   - the file changed only as the CLI's refresh changes it: the token
//     fields, the expiry moved forward; every other value (account,
//     organisation, scopes, subscription) the same, no key added or
//     removed.
//
// Anything else keeps the user's file, and the attempt records why.

// CredentialRule is how an agent CLI's refresh changes its credentials
// file (the provider's knowledge; the attempt passes it in Input).
type CredentialRule struct {
	// Name is the file's name in the login folder (".credentials.json").
	Name string `json:"name"`
	// Hosts are the CLI's token endpoint hosts.
	Hosts []string `json:"token_hosts"`
	// Tokens are the fields a refresh replaces (JSON pointers such as
	// "/claudeAiOauth/accessToken"): strings, changed or not.
	Tokens []string `json:"tokens"`
	// Expiry are the fields a refresh moves forward when it replaces a
	// token: numbers (time since the epoch) or RFC 3339 times.
	Expiry []string `json:"expiry,omitempty"`
}

// CredentialOutcome is what became of a credentials file the step
// changed: carried back to the user's, or the user's kept and why. It
// holds no token.
type CredentialOutcome struct {
	File    string `json:"file"` // the user's credentials file
	Carried bool   `json:"carried"`
	// Host is the token endpoint host the step reached (carried).
	Host string `json:"token_host,omitempty"`
	// Reason says why the user's file was kept (not carried).
	Reason string `json:"reason,omitempty"`
}

// rule returns the refresh rule of credentials file name, nil for none.
func (lc LoginCopy) rule(name string) *CredentialRule {
	for i := range lc.Refresh {
		if lc.Refresh[i].Name == name {
			return &lc.Refresh[i]
		}
	}
	return nil
}

// carryBack replaces the user's credentials file (to) with the step's
// (from) when the step's is a regular file of at most 64 KiB holding one
// JSON object, the step reached a token host of rule, and the file
// differs from the user's only as rule's refresh changes it. The outcome
// is nil when the step left the file as it was (or removed it); the error
// is for what kusaw could not do, not for what it refused.
func carryBack(from, to string, rule *CredentialRule, reached func(host string) bool) (*CredentialOutcome, error) {
	kept := func(format string, args ...any) (*CredentialOutcome, error) {
		return &CredentialOutcome{File: to, Reason: fmt.Sprintf(format, args...)}, nil
	}
	b, err := readCredential(from)
	if err != nil {
		return kept("the step's file is %v", err)
	}
	if b == nil {
		return nil, nil
	}
	old, err := readCredential(to)
	switch {
	case err != nil:
		return kept("the user's file is %v", err)
	case old == nil:
		return kept("the user has no credentials file here: a login the step made is never carried back")
	case bytes.Equal(old, b):
		return nil, nil
	case rule == nil:
		return kept("kusaw knows no refresh of this CLI's %s, so a change to it is never carried back", baseName(to))
	}
	if err := refreshDiff(old, b, rule); err != nil {
		if errors.Is(err, errNoChange) {
			return nil, nil
		}
		return kept("the step's file %v; a refresh changes only %s", err, strings.Join(rule.changes(), ", "))
	}
	host := ""
	for _, h := range rule.Hosts {
		if reached != nil && reached(h) {
			host = h
			break
		}
	}
	if host == "" {
		why := "made no connection to"
		if reached == nil {
			why = "had no egress log (network: open or none): kusaw cannot see a connection to"
		}
		return kept("the step %s %s, where the CLI refreshes its login: a refresh cannot be told from a swap (sign in again outside kusaw if the CLI asks)", why, strings.Join(rule.Hosts, " or "))
	}
	if fi, err := os.Lstat(to); err == nil && !fi.Mode().IsRegular() {
		return kept("the user's file is not a regular file")
	}
	if err := writeCredential(to, b); err != nil {
		return nil, err
	}
	return &CredentialOutcome{File: to, Carried: true, Host: host}, nil
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// changes names what rule lets a refresh change, for a refusal's message.
func (r *CredentialRule) changes() []string {
	out := append([]string(nil), r.Tokens...)
	for _, e := range r.Expiry {
		out = append(out, e+" (forward)")
	}
	return out
}

var errNoChange = errors.New("no value changed")

// refreshDiff checks that JSON object b differs from a only as a refresh
// under rule does: some token replaced, each expiry present then later,
// nothing else changed, no key added or removed. Numbers are compared as
// written (json.Number), so a value written another way is a change.
func refreshDiff(a, b []byte, rule *CredentialRule) error {
	va, err := decodeNumbers(a)
	if err != nil {
		return err
	}
	vb, err := decodeNumbers(b)
	if err != nil {
		return err
	}
	d := differ{rule: rule}
	if err := d.walk("", va, vb); err != nil {
		return err
	}
	switch {
	case len(d.tokens) == 0 && len(d.expiries) == 0:
		return errNoChange
	case len(d.tokens) == 0:
		return fmt.Errorf("changes %s but no token", strings.Join(d.expiries, ", "))
	case len(d.stale) > 0:
		return fmt.Errorf("replaces a token without moving %s forward", strings.Join(d.stale, ", "))
	}
	return nil
}

type differ struct {
	rule     *CredentialRule
	tokens   []string // token fields replaced
	expiries []string // expiry fields moved forward
	stale    []string // expiry fields present and not moved forward
}

func (d *differ) walk(path string, a, b any) error {
	switch {
	case slices.Contains(d.rule.Tokens, path):
		sa, oka := a.(string)
		sb, okb := b.(string)
		if !oka || !okb || sb == "" {
			return fmt.Errorf("makes %s something other than a token", path)
		}
		if sa != sb {
			d.tokens = append(d.tokens, path)
		}
		return nil
	case slices.Contains(d.rule.Expiry, path):
		later, err := laterTime(a, b)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		if later {
			d.expiries = append(d.expiries, path)
		} else {
			d.stale = append(d.stale, path)
		}
		return nil
	}
	ma, oka := a.(map[string]any)
	mb, okb := b.(map[string]any)
	if oka && okb {
		for _, k := range sortedKeys(ma) {
			if _, ok := mb[k]; !ok {
				return fmt.Errorf("removes %s", shortPath(path+"/"+k))
			}
		}
		for _, k := range sortedKeys(mb) {
			if _, ok := ma[k]; !ok {
				return fmt.Errorf("adds %s", shortPath(path+"/"+k))
			}
		}
		for _, k := range sortedKeys(ma) {
			if err := d.walk(path+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), ma[k], mb[k]); err != nil {
				return err
			}
		}
		return nil
	}
	if !reflect.DeepEqual(a, b) {
		if path == "" {
			path = "the whole file"
		}
		return fmt.Errorf("changes %s", shortPath(path))
	}
	return nil
}

// shortPath keeps a field's path (the step's key names) to one short,
// printable line in a refusal.
func shortPath(p string) string {
	p = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, p)
	if len(p) > 120 {
		p = p[:120] + "..."
	}
	return p
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// laterTime reports whether expiry b is later than a: both numbers, or
// both RFC 3339 times.
func laterTime(a, b any) (bool, error) {
	if na, ok := a.(json.Number); ok {
		nb, ok := b.(json.Number)
		fa, _, erra := big.ParseFloat(string(na), 10, 128, big.ToNearestEven)
		fb, _, errb := big.ParseFloat(string(nb), 10, 128, big.ToNearestEven)
		if !ok || erra != nil || errb != nil {
			return false, errors.New("not a time the refresh could have written")
		}
		return fb.Cmp(fa) > 0, nil
	}
	sa, oka := a.(string)
	sb, okb := b.(string)
	ta, erra := time.Parse(time.RFC3339Nano, sa)
	tb, errb := time.Parse(time.RFC3339Nano, sb)
	if !oka || !okb || erra != nil || errb != nil {
		return false, errors.New("not a time the refresh could have written")
	}
	return tb.After(ta), nil
}

func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("is not one JSON object")
	}
	return v, nil
}

// writeCredential replaces p with b: a new 0600 file renamed over it.
func writeCredential(p string, b []byte) error {
	tmp := p + ".kusaw-new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox: carrying the login back: %w", err)
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sandbox: carrying the login back: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sandbox: carrying the login back: %w", err)
	}
	return nil
}

// readCredential reads a credentials file of the expected shape; nil, nil
// when it is missing. Its errors are phrases ("not a regular file").
func readCredential(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errors.New("not a regular file (a link, or unreadable)")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, errors.New("unreadable")
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxCredential {
		return nil, errors.New("not a regular file of at most 64 KiB")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCredential+1))
	if err != nil {
		return nil, errors.New("unreadable")
	}
	var obj map[string]json.RawMessage
	if len(b) > maxCredential || json.Unmarshal(b, &obj) != nil {
		return nil, errors.New("not one JSON object")
	}
	return b, nil
}
