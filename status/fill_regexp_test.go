package status

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// Fill, written without regexp (cmd/kusaw/early), replaces what the
// expression it replaced matched: each placeholder as a whole word.
func TestFillSameAsItsExpression(t *testing.T) {
	re := regexp.MustCompile(`\b(RUN|STEP|KEY|HOST|PROVIDER)\b`)
	known := map[string]string{"RUN": "r-1", "STEP": "s_2", "KEY": "K", "HOST": "h.example", "PROVIDER": "p"}
	parts := []string{"RUN", "STEP", "KEY", "HOST", "PROVIDER", "RUNNER", "_", "x", " ", "-", "9", "é", ".", "KEYS", "\n"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		var s string
		for range r.IntN(12) {
			s += parts[r.IntN(len(parts))]
		}
		want := re.ReplaceAllStringFunc(s, func(w string) string { return known[w] })
		if got := Fill(s, known); got != want {
			t.Fatalf("Fill(%q) = %q, the expression gives %q", s, got, want)
		}
	}
}
