package serve

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestVerifyDelivery: each forge's scheme, from the attacker's side (no
// signature, a wrong one, a signature of another body) and the twin.
func TestVerifyDelivery(t *testing.T) {
	body := []byte(`{"action":"labeled"}`)
	sign := func(b []byte) string {
		m := hmac.New(sha256.New, []byte("s3cret"))
		m.Write(b)
		return hex.EncodeToString(m.Sum(nil))
	}
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, c := range []struct {
		name, forge string
		h           http.Header
		want        error
	}{
		{"github signed", "github", h("X-Hub-Signature-256", "sha256="+sign(body)), nil},
		{"github unsigned", "github", h(), errUnsigned},
		{"github sha1 only", "github", h("X-Hub-Signature", "sha1=abc"), errUnsigned},
		{"github other body", "github", h("X-Hub-Signature-256", "sha256="+sign([]byte("{}"))), errForged},
		{"github not hex", "github", h("X-Hub-Signature-256", "sha256=zz"), errForged},
		{"gitea signed", "gitea", h("X-Gitea-Signature", sign(body)), nil},
		{"gitea unsigned", "gitea", h(), errUnsigned},
		{"gitea forged", "gitea", h("X-Gitea-Signature", sign([]byte("x"))), errForged},
		{"gitlab token", "gitlab", h("X-Gitlab-Token", "s3cret"), nil},
		{"gitlab no token", "gitlab", h(), errUnsigned},
		{"gitlab wrong token", "gitlab", h("X-Gitlab-Token", "s3cres"), errForged},
		{"unknown forge", "bitbucket", h("X-Hub-Signature-256", "sha256="+sign(body)), errForged},
	} {
		if err := verifyDelivery(c.forge, "s3cret", c.h, body); !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestParseGitLabAndGitea: the GitLab and Gitea equivalents of GitHub's
// events come out as the same kusaw events.
func TestParseGitLabAndGitea(t *testing.T) {
	for _, c := range []struct {
		name, forge, kind, body string
		want                    forgeEvent
	}{
		{"gitlab issue labeled", "gitlab", "Issue Hook",
			`{"object_kind":"issue","user":{"username":"alice"},"project":{"path_with_namespace":"acme/app"},
			  "object_attributes":{"iid":4,"title":"T","description":"D","action":"update","url":"u"},
			  "changes":{"labels":{"previous":[{"title":"bug"}],"current":[{"title":"bug"},{"title":"kusaw"}]}}}`,
			forgeEvent{Event: "issues.labeled", Repo: "acme/app", Sender: "alice", Issue: 4, IssueTitle: "T", IssueBody: "D", Label: "kusaw"}},
		{"gitlab label removed", "gitlab", "Issue Hook",
			`{"user":{"username":"alice"},"project":{"path_with_namespace":"acme/app"},"object_attributes":{"iid":4,"action":"update"},
			  "changes":{"labels":{"previous":[{"title":"kusaw"}],"current":[]}}}`,
			forgeEvent{Event: "", Repo: "acme/app", Sender: "alice", Issue: 4}},
		{"gitlab note on MR", "gitlab", "Note Hook",
			`{"user":{"username":"bob"},"project":{"path_with_namespace":"acme/app"},"object_attributes":{"note":"/kusaw run","noteable_type":"MergeRequest"},
			  "merge_request":{"iid":12,"source_branch":"kusaw/r1"}}`,
			forgeEvent{Event: "issue_comment.created", Repo: "acme/app", Sender: "bob", Comment: "/kusaw run", IsPull: true, PullRequest: 12, Issue: 12, Branch: "kusaw/r1"}},
		{"gitlab changes requested", "gitlab", "Merge Request Hook",
			`{"user":{"username":"bob"},"project":{"path_with_namespace":"acme/app"},"object_attributes":{"iid":12,"action":"update","source_branch":"kusaw/r1"},
			  "changes":{"reviewers":{"previous":[{"username":"bob","state":"unreviewed"}],"current":[{"username":"bob","state":"requested_changes"}]}}}`,
			forgeEvent{Event: "pull_request_review.submitted", Repo: "acme/app", Sender: "bob", PullRequest: 12, Branch: "kusaw/r1", ReviewState: "changes_requested"}},
		{"gitea label", "gitea", "issues",
			`{"action":"label_updated","issue":{"number":3,"title":"T","labels":[{"name":"kusaw"}]},"repository":{"full_name":"acme/app"},"sender":{"login":"alice"}}`,
			forgeEvent{Event: "issues.labeled", Repo: "acme/app", Sender: "alice", Issue: 3, IssueTitle: "T", Labels: []string{"kusaw"}}},
		{"gitea review rejected", "gitea", "pull_request_review_rejected",
			`{"action":"reviewed","pull_request":{"number":8,"head":{"ref":"kusaw/r2"}},"review":{"type":"pull_request_review_rejected","content":"fix it"},"repository":{"full_name":"acme/app"},"sender":{"login":"bob"}}`,
			forgeEvent{Event: "pull_request_review.submitted", Repo: "acme/app", Sender: "bob", PullRequest: 8, Branch: "kusaw/r2", ReviewState: "changes_requested", ReviewBody: "fix it"}},
	} {
		h := http.Header{}
		switch c.forge {
		case "gitlab":
			h.Set("X-Gitlab-Event", c.kind)
		case "gitea":
			h.Set("X-Gitea-Event", c.kind)
		}
		ev, err := parseDelivery(c.forge, h, []byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := *ev
		got.Forge, got.Delivery, got.URL = "", "", ""
		if c.want.Labels == nil && got.Labels != nil && c.forge == "gitlab" {
			got.Labels = nil
		}
		if got.Event != c.want.Event || got.Repo != c.want.Repo || got.Sender != c.want.Sender || got.Issue != c.want.Issue ||
			got.PullRequest != c.want.PullRequest || got.Label != c.want.Label || got.ReviewState != c.want.ReviewState ||
			got.Comment != c.want.Comment || got.Branch != c.want.Branch || got.ReviewBody != c.want.ReviewBody || got.IsPull != c.want.IsPull {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
		if got.WriteAccess {
			t.Errorf("%s: write access assumed on %s, which does not say", c.name, c.forge)
		}
	}
}

// TestDeliveriesLogStaysBounded: the ids seen are kept across restarts,
// and the file is rewritten before it grows past twice what is kept.
func TestDeliveriesLogStaysBounded(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "serve"), 0o700)
	in := newIntake(dir, nil)
	for i := 0; i < 2*seenKeep+5; i++ {
		if fresh, err := in.firstTime("github", strconv.Itoa(i)); !fresh || err != nil {
			t.Fatalf("delivery %d: %v %v", i, fresh, err)
		}
	}
	b, _ := os.ReadFile(in.file)
	if n := strings.Count(string(b), "\n"); n > 2*seenKeep {
		t.Fatalf("deliveries.log holds %d lines", n)
	}
	again := newIntake(dir, nil)
	if fresh, _ := again.firstTime("github", strconv.Itoa(2*seenKeep+4)); fresh {
		t.Fatal("a recent delivery was forgotten across the restart")
	}
}
