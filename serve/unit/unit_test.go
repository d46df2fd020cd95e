package unit

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

func TestLaunchdIsWellFormed(t *testing.T) {
	u, err := NewServe("darwin", "/opt/kusaw & co/kusaw", "/Users/me/f<1>/factory.yaml", "/Users/me/f<1>/.kusaw", "/Users/me", "")
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(u.Content))
	var strs []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("plist is not well-formed XML: %v\n%s", err, u.Content)
		}
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			strs = append(strs, string(cd))
		}
	}
	got := strings.Join(strs, "|")
	if !strings.Contains(got, "/opt/kusaw & co/kusaw|serve|-f|/Users/me/f<1>/factory.yaml") || !strings.HasPrefix(u.Path, "/Users/me/Library/LaunchAgents/dev.kusaw.serve.") {
		t.Fatalf("launchd agent: %s\n%s", u.Path, got)
	}
	if _, err := NewServe("windows", "/k", "/f.yaml", "/s", "/h", ""); err == nil {
		t.Fatal("an unsupported OS must be refused")
	}
	s, _ := NewServe("linux", "/a b/kusaw", "/x/factory.yaml", "/x/.kusaw", "/h", "")
	if !strings.Contains(s.Content, `ExecStart="/a b/kusaw" serve -f /x/factory.yaml`) || s.Path != "/h/.config/systemd/user/"+s.Name {
		t.Fatalf("systemd unit: %s\n%s", s.Path, s.Content)
	}
}
