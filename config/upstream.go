package config

import (
	"fmt"
	"net/url"
	"strconv"
)

// CheckInjectUpstream is the rule for a URL inject forwards a key to (a
// provider's base_url under inject, an inject entry's base_url): https://,
// no credentials, query or fragment, a host name kusaw accepts and a port
// from 1 to 65535. validate and the egress proxy both use it, so the run
// never refuses what validate passed, in other words.
func CheckInjectUpstream(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		shown := raw
		if err == nil && u.User != nil {
			shown = u.Redacted() // never echo a password
		}
		return fmt.Errorf("base URL %q must be an https:// URL without credentials, query or fragment", shown)
	}
	if _, err := NormalizeHostName(u.Hostname()); err != nil {
		return fmt.Errorf("base URL %q: %v", raw, err)
	}
	if ps := u.Port(); ps != "" {
		if port, err := strconv.Atoi(ps); err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("base URL %q has a bad port", raw)
		}
	}
	return nil
}
