package attempt

import (
	"testing"

	"github.com/kusaw/kusaw/egress"
)

// The carry-back of a refreshed login needs the step to have reached a
// token host: only an admitted connection that carried bytes both ways
// counts. A connection that failed, a name the proxy admitted but that
// never answered, and a host the step did not ask for do not; the host's
// case does not matter.
func TestEgressReachedHost(t *testing.T) {
	o := &egressObserver{a: &Attempt{}}
	for _, d := range []egress.Decision{
		{Kind: egress.KindConnect, Host: "api.anthropic.com", Port: 443, Decision: egress.Allow, BytesUp: 900, BytesDown: 5000},
		{Kind: egress.KindConnect, Host: "platform.claude.com", Port: 443, Decision: egress.Fail, Reason: egress.ReasonTimeout},
		{Kind: egress.KindConnect, Host: "console.anthropic.com", Port: 443, Decision: egress.Allow, BytesUp: 300},
		{Kind: egress.KindConnect, Host: "Auth.OpenAI.com", Port: 443, Decision: egress.Allow, BytesUp: 300, BytesDown: 40},
	} {
		o.Decision(d)
	}
	for host, want := range map[string]bool{"api.anthropic.com": true, "platform.claude.com": false, "console.anthropic.com": false,
		"auth.openai.com": true, "AUTH.openai.com": true, "claude.ai": false} {
		if got := o.reachedHost(host); got != want {
			t.Errorf("%s reached: %v, want %v", host, got, want)
		}
	}
}
