package serve

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// forgeEvent is one webhook delivery in kusaw's words, the same for every
// forge (docs/intake.md maps each forge's names). Its text fields come
// from whoever wrote the issue or comment: untrusted, they only ever fill
// a run's parameters.
type forgeEvent struct {
	Forge    string
	Delivery string
	Event    string // config.TriggerEvents, or "" for one kusaw does not act on
	Repo     string
	Sender   string
	// WriteAccess: the forge says the sender may write to the repository
	// (GitHub's author association; labelling an issue needs triage).
	WriteAccess bool

	Issue                      int
	IssueTitle, IssueBody, URL string
	IsPull                     bool // the issue (of a comment) is a pull request
	PullRequest                int
	Branch                     string // the pull request's head branch
	Label                      string
	Labels                     []string
	Comment                    string
	ReviewState, ReviewBody    string
	ReviewID                   int64
}

// errUnsigned and errForged: a delivery kusaw refuses before reading it.
var (
	errUnsigned = errors.New("the delivery is not signed")
	errForged   = errors.New("the delivery's signature does not match the webhook secret")
)

// verifyDelivery checks a delivery's signature over the raw body with the
// forge's scheme, in constant time, before anything in it is parsed.
func verifyDelivery(forge, secret string, h http.Header, body []byte) error {
	switch forge {
	case "github":
		sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
		if !ok || sig == "" {
			return errUnsigned
		}
		return checkHMAC(secret, body, sig)
	case "gitea":
		sig := h.Get("X-Gitea-Signature")
		if sig == "" {
			sig = h.Get("X-Hub-Signature-256") // Gitea sends both; the first is the bare hex
			sig = strings.TrimPrefix(sig, "sha256=")
		}
		if sig == "" {
			return errUnsigned
		}
		return checkHMAC(secret, body, sig)
	case "gitlab":
		tok := h.Get("X-Gitlab-Token")
		if tok == "" {
			return errUnsigned
		}
		if subtle.ConstantTimeCompare([]byte(tok), []byte(secret)) != 1 {
			return errForged
		}
		return nil
	}
	return errForged
}

func checkHMAC(secret string, body []byte, sigHex string) error {
	got, err := hex.DecodeString(sigHex)
	if err != nil {
		return errForged
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return errForged
	}
	return nil
}

// deliveryID is the forge's id of a delivery (the same on a redelivery).
func deliveryID(forge string, h http.Header) string {
	switch forge {
	case "github":
		return h.Get("X-GitHub-Delivery")
	case "gitea":
		return h.Get("X-Gitea-Delivery")
	case "gitlab":
		if id := h.Get("X-Gitlab-Event-UUID"); id != "" {
			return id
		}
		return h.Get("Idempotency-Key")
	}
	return ""
}

// parseDelivery reads a verified delivery. An event kusaw does not act on
// comes back with Event "" and no error.
func parseDelivery(forge string, h http.Header, body []byte) (*forgeEvent, error) {
	ev := &forgeEvent{Forge: forge, Delivery: deliveryID(forge, h)}
	var err error
	switch forge {
	case "github":
		err = ev.github(h.Get("X-GitHub-Event"), body)
	case "gitea":
		err = ev.gitea(h.Get("X-Gitea-Event"), body)
	case "gitlab":
		err = ev.gitlab(h.Get("X-Gitlab-Event"), body)
	}
	return ev, err
}

type ghUser struct {
	Login    string `json:"login"`
	Username string `json:"username"`
}

type ghIssue struct {
	Number      int             `json:"number"`
	Title       string          `json:"title"`
	Body        string          `json:"body"`
	HTMLURL     string          `json:"html_url"`
	PullRequest json.RawMessage `json:"pull_request"`
	Labels      []struct {
		Name string `json:"name"`
	} `json:"labels"`
	AuthorAssociation string `json:"author_association"`
	User              ghUser `json:"user"`
}

type ghPull struct {
	Number  int    `json:"number"`
	HTMLURL string `json:"html_url"`
	Title   string `json:"title"`
	Body    string `json:"body"`
	Head    struct {
		Ref string `json:"ref"`
	} `json:"head"`
}

type ghPayload struct {
	Action  string                `json:"action"`
	Issue   ghIssue               `json:"issue"`
	Label   struct{ Name string } `json:"label"`
	Comment struct {
		Body              string `json:"body"`
		User              ghUser `json:"user"`
		AuthorAssociation string `json:"author_association"`
	} `json:"comment"`
	Review struct {
		ID                int64  `json:"id"`
		State             string `json:"state"`
		Body              string `json:"body"`
		Content           string `json:"content"` // Gitea
		Type              string `json:"type"`    // Gitea
		User              ghUser `json:"user"`
		AuthorAssociation string `json:"author_association"`
	} `json:"review"`
	PullRequest ghPull `json:"pull_request"`
	Repository  struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Sender ghUser `json:"sender"`
	IsPull bool   `json:"is_pull"` // Gitea's issue_comment
}

// writers are GitHub's author associations of users who may write.
var writers = []string{"OWNER", "MEMBER", "COLLABORATOR"}

func isWriter(assoc string) bool {
	for _, w := range writers {
		if strings.EqualFold(assoc, w) {
			return true
		}
	}
	return false
}

func (ev *forgeEvent) fromIssue(is ghIssue) {
	ev.Issue, ev.IssueTitle, ev.IssueBody, ev.URL = is.Number, is.Title, is.Body, is.HTMLURL
	ev.IsPull = len(is.PullRequest) > 0 && string(is.PullRequest) != "null"
	for _, l := range is.Labels {
		ev.Labels = append(ev.Labels, l.Name)
	}
}

func (ev *forgeEvent) github(kind string, body []byte) error {
	var p ghPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return err
	}
	ev.Repo, ev.Sender = p.Repository.FullName, p.Sender.Login
	switch {
	case kind == "issues" && p.Action == "labeled":
		ev.Event, ev.Label = "issues.labeled", p.Label.Name
		ev.fromIssue(p.Issue)
		// GitHub lets only triage and above label an issue, except the
		// labels an issue template adds: anyone who opens an issue from
		// it labels it, so the issue's own author must be a writer.
		ev.WriteAccess = !strings.EqualFold(p.Sender.Login, p.Issue.User.Login) || isWriter(p.Issue.AuthorAssociation)
	case kind == "issues" && p.Action == "opened":
		ev.Event = "issues.opened"
		ev.fromIssue(p.Issue)
		ev.WriteAccess = isWriter(p.Issue.AuthorAssociation)
	case kind == "issue_comment" && p.Action == "created":
		ev.Event, ev.Comment = "issue_comment.created", p.Comment.Body
		ev.fromIssue(p.Issue)
		if ev.IsPull {
			ev.PullRequest = p.Issue.Number
		}
		ev.WriteAccess = isWriter(p.Comment.AuthorAssociation)
	case kind == "pull_request_review" && p.Action == "submitted":
		ev.Event = "pull_request_review.submitted"
		ev.ReviewState, ev.ReviewBody, ev.ReviewID = strings.ToLower(p.Review.State), p.Review.Body, p.Review.ID
		ev.PullRequest, ev.Branch, ev.URL = p.PullRequest.Number, p.PullRequest.Head.Ref, p.PullRequest.HTMLURL
		ev.WriteAccess = isWriter(p.Review.AuthorAssociation)
	}
	return nil
}

func (ev *forgeEvent) gitea(kind string, body []byte) error {
	var p ghPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return err
	}
	ev.Repo, ev.Sender = p.Repository.FullName, p.Sender.Login
	if ev.Sender == "" {
		ev.Sender = p.Sender.Username
	}
	switch {
	case kind == "issues" && p.Action == "label_updated":
		// Gitea names the labels the issue has now, not the one added.
		ev.Event = "issues.labeled"
		ev.fromIssue(p.Issue)
	case kind == "issues" && p.Action == "opened":
		ev.Event = "issues.opened"
		ev.fromIssue(p.Issue)
	case kind == "issue_comment" && p.Action == "created":
		ev.Event, ev.Comment = "issue_comment.created", p.Comment.Body
		ev.fromIssue(p.Issue)
		if ev.IsPull || p.IsPull {
			ev.IsPull, ev.PullRequest = true, p.Issue.Number
		}
	case strings.HasPrefix(kind, "pull_request_review_"):
		ev.Event = "pull_request_review.submitted"
		switch kind {
		case "pull_request_review_rejected":
			ev.ReviewState = "changes_requested"
		case "pull_request_review_approved":
			ev.ReviewState = "approved"
		default:
			ev.ReviewState = "commented"
		}
		ev.ReviewBody = p.Review.Content
		ev.PullRequest, ev.Branch, ev.URL = p.PullRequest.Number, p.PullRequest.Head.Ref, p.PullRequest.HTMLURL
	}
	return nil
}

type glUser struct {
	Username string `json:"username"`
	State    string `json:"state"`
}

type glPayload struct {
	User    glUser `json:"user"`
	Project struct {
		PathWithNamespace string `json:"path_with_namespace"`
	} `json:"project"`
	ObjectAttributes struct {
		IID          int    `json:"iid"`
		Title        string `json:"title"`
		Description  string `json:"description"`
		URL          string `json:"url"`
		Action       string `json:"action"`
		Note         string `json:"note"`
		NoteableType string `json:"noteable_type"`
		SourceBranch string `json:"source_branch"`
	} `json:"object_attributes"`
	Issue struct {
		IID         int    `json:"iid"`
		Title       string `json:"title"`
		Description string `json:"description"`
		URL         string `json:"url"`
	} `json:"issue"`
	MergeRequest struct {
		IID          int    `json:"iid"`
		SourceBranch string `json:"source_branch"`
		URL          string `json:"url"`
	} `json:"merge_request"`
	Labels  []struct{ Title string } `json:"labels"`
	Changes struct {
		Labels struct {
			Previous []struct{ Title string } `json:"previous"`
			Current  []struct{ Title string } `json:"current"`
		} `json:"labels"`
		Reviewers struct {
			Previous []glUser `json:"previous"`
			Current  []glUser `json:"current"`
		} `json:"reviewers"`
	} `json:"changes"`
}

func (ev *forgeEvent) gitlab(kind string, body []byte) error {
	var p glPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return err
	}
	oa := p.ObjectAttributes
	ev.Repo, ev.Sender = p.Project.PathWithNamespace, p.User.Username
	switch kind {
	case "Issue Hook":
		ev.Issue, ev.IssueTitle, ev.IssueBody, ev.URL = oa.IID, oa.Title, oa.Description, oa.URL
		for _, l := range p.Labels {
			ev.Labels = append(ev.Labels, l.Title)
		}
		switch oa.Action {
		case "open":
			ev.Event = "issues.opened"
		case "update":
			// labeled: a label in current that previous lacks
			prev := map[string]bool{}
			for _, l := range p.Changes.Labels.Previous {
				prev[l.Title] = true
			}
			for _, l := range p.Changes.Labels.Current {
				if !prev[l.Title] {
					ev.Event, ev.Label = "issues.labeled", l.Title
					break
				}
			}
		}
	case "Note Hook":
		ev.Event, ev.Comment = "issue_comment.created", oa.Note
		switch oa.NoteableType {
		case "Issue":
			ev.Issue, ev.IssueTitle, ev.IssueBody, ev.URL = p.Issue.IID, p.Issue.Title, p.Issue.Description, p.Issue.URL
		case "MergeRequest":
			ev.IsPull, ev.PullRequest, ev.Branch, ev.URL = true, p.MergeRequest.IID, p.MergeRequest.SourceBranch, p.MergeRequest.URL
			ev.Issue = p.MergeRequest.IID
		default:
			ev.Event = ""
		}
	case "Merge Request Hook":
		ev.PullRequest, ev.Branch, ev.URL = oa.IID, oa.SourceBranch, oa.URL
		switch {
		case oa.Action == "approved":
			ev.Event, ev.ReviewState = "pull_request_review.submitted", "approved"
		case oa.Action == "update":
			// A submitted review shows as the sender's new reviewer state.
			for _, r := range p.Changes.Reviewers.Current {
				if r.Username == ev.Sender && r.State == "requested_changes" {
					ev.Event, ev.ReviewState = "pull_request_review.submitted", "changes_requested"
				}
			}
		}
	}
	return nil
}
