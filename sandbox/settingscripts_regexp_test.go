package sandbox

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// The hand-written matchers (kept off regexp so that kusaw sandbox exec
// initialises less, cmd/kusaw/early) say what the expressions they
// replaced said, on every string of a small alphabet up to a length and
// on random longer ones.
func TestSettingsMatchersSameAsTheirExpressions(t *testing.T) {
	trailing := regexp.MustCompile(`,(\s*[}\]])`)
	ext := regexp.MustCompile(`\.(sh|bash|zsh|js|mjs|cjs|ts|mts|py|rb|pl|php|ps1|lua|jar)$`)
	commas := []string{",", " ", "\t", "\n", "}", "]", "a", "\"", "\r", "\f", "\v"}
	words := []string{".", "sh", "s", "h", "ps1", "js", "m", "x", "/", "jar", "py", "bash"}
	check := func(s, w string) {
		if got, want := string(dropTrailingCommas([]byte(s))), trailing.ReplaceAllString(s, "$1"); got != want {
			t.Fatalf("dropTrailingCommas(%q) = %q, the expression gives %q", s, got, want)
		}
		if got, want := hasScriptExt(w), ext.MatchString(w); got != want {
			t.Fatalf("hasScriptExt(%q) = %v, the expression says %v", w, got, want)
		}
	}
	var all func(prefix, wprefix string, n int)
	all = func(prefix, wprefix string, n int) {
		check(prefix, wprefix)
		if n == 0 {
			return
		}
		for i := range commas {
			all(prefix+commas[i], wprefix+words[i%len(words)], n-1)
		}
	}
	all("", "", 5)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var s, w string
		for range r.IntN(40) {
			s += commas[r.IntN(len(commas))]
			w += words[r.IntN(len(words))]
		}
		check(s, w)
	}
}
