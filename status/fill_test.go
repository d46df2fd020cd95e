package status

import "testing"

func TestFillPlaceholders(t *testing.T) {
	got := Fill("kusaw logs RUN --step STEP; RUNNER stays; KEY unknown", map[string]string{"RUN": "r1", "STEP": "checks"})
	if want := "kusaw logs r1 --step checks; RUNNER stays; KEY unknown"; got != want {
		t.Errorf("Fill = %q, want %q", got, want)
	}
}
