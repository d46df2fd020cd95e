package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestColorSetting: always colours outcome words, never and a
// non-terminal under auto do not, and NO_COLOR turns auto off.
func TestColorSetting(t *testing.T) {
	if !useColor("always", false) || useColor("never", true) || useColor("auto", false) {
		t.Error("always/never/auto without a terminal")
	}
	t.Setenv("NO_COLOR", "")
	if !useColor("auto", true) {
		t.Error("auto on a terminal")
	}
	t.Setenv("NO_COLOR", "1")
	if useColor("auto", true) {
		t.Error("NO_COLOR did not turn auto off")
	}
	p := newProgress(&bytes.Buffer{})
	p.color = true
	if got := p.paint("passed"); got != "\033[32mpassed\033[0m" {
		t.Errorf("passed: %q", got)
	}
	if got := p.paint("failed"); !strings.HasPrefix(got, "\033[31m") {
		t.Errorf("failed: %q", got)
	}
	p.color = false
	if got := p.paint("failed"); got != "failed" {
		t.Errorf("plain: %q", got)
	}
}
