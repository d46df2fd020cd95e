package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:           "/plain",
		`/a\040b`:          "/a b",
		`/tab\011nl\012`:   "/tab\tnl\n",
		`/back\134slash`:   `/back\slash`,
		`/not\99`:          `/not\99`,
		`/short\04`:        `/short\04`,
		`/end\`:            `/end\`,
		`\040lead\040\040`: " lead  ",
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
