package deliver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Thread is an issue or pull request on a forge that kusaw comments on
// (serve's intake: a run started and ended) or reads a review of.
type Thread struct {
	Forge  string // ForgeGitHub, ForgeGitLab or ForgeGitea
	APIURL string
	Repo   string // OWNER/NAME (GitLab: the project's path)
	Token  string // never logged
	Number int    // the or pull request's number (GitLab: iid)
	IsPull bool   // GitLab keeps merge requests' notes apart from issues'
	// Client is the HTTP client; nil means one with a 30s timeout.
	Client *http.Client
}

func (t Thread) forge() (*forge, error) {
	if t.Token == "" {
		return nil, fmt.Errorf("forge %s has no token; store one with kusaw config set forges.%s.token --secret", t.Forge, t.Forge)
	}
	return forgeOf(PullRequest{Forge: t.Forge, APIURL: t.APIURL, Repo: t.Repo, Token: t.Token, Client: t.Client})
}

// Comment posts body as a new comment on the thread.
func Comment(ctx context.Context, t Thread, body string) error {
	f, err := t.forge()
	if err != nil {
		return err
	}
	switch t.Forge {
	case ForgeGitLab:
		kind := "issues"
		if t.IsPull {
			kind = "merge_requests"
		}
		u := fmt.Sprintf("%s/projects/%s/%s/%d/notes", f.base, url.PathEscape(t.Repo), kind, t.Number)
		return f.call(ctx, "POST", u, map[string]any{"body": body}, nil)
	default:
		owner, name, _ := strings.Cut(t.Repo, "/")
		u := fmt.Sprintf("%s/repos/%s/%s/issues/%d/comments", f.base, url.PathEscape(owner), url.PathEscape(name), t.Number)
		return f.call(ctx, "POST", u, map[string]any{"body": body}, nil)
	}
}

// ReviewComment is one comment of a review on a line of a file.
type ReviewComment struct {
	Path string
	Line int
	Body string
}

// ReviewComments are the comments of review id on the pull request (on
// GitLab: the sender's open diff notes on the merge request).
func ReviewComments(ctx context.Context, t Thread, id int64, author string) ([]ReviewComment, error) {
	f, err := t.forge()
	if err != nil {
		return nil, err
	}
	var out []ReviewComment
	switch t.Forge {
	case ForgeGitLab:
		var notes []struct {
			Type   string `json:"type"`
			Body   string `json:"body"`
			System bool   `json:"system"`
			Author struct {
				Username string `json:"username"`
			} `json:"author"`
			Resolved bool `json:"resolved"`
			Position *struct {
				NewPath string `json:"new_path"`
				NewLine int    `json:"new_line"`
			} `json:"position"`
		}
		u := fmt.Sprintf("%s/projects/%s/merge_requests/%d/notes?sort=asc&per_page=100", f.base, url.PathEscape(t.Repo), t.Number)
		if err := f.call(ctx, "GET", u, nil, &notes); err != nil {
			return nil, err
		}
		for _, n := range notes {
			if n.System || n.Resolved || n.Position == nil || n.Author.Username != author {
				continue
			}
			out = append(out, ReviewComment{Path: n.Position.NewPath, Line: n.Position.NewLine, Body: n.Body})
		}
	default:
		var list []struct {
			Path         string `json:"path"`
			Line         int    `json:"line"`
			OriginalLine int    `json:"original_line"`
			Position     int    `json:"position"`
			Body         string `json:"body"`
		}
		owner, name, _ := strings.Cut(t.Repo, "/")
		u := fmt.Sprintf("%s/repos/%s/%s/pulls/%d/reviews/%d/comments", f.base, url.PathEscape(owner), url.PathEscape(name), t.Number, id)
		if err := f.call(ctx, "GET", u, nil, &list); err != nil {
			return nil, err
		}
		for _, c := range list {
			line := c.Line
			if line == 0 {
				line = c.OriginalLine
			}
			if line == 0 {
				line = c.Position
			}
			out = append(out, ReviewComment{Path: c.Path, Line: line, Body: c.Body})
		}
	}
	return out, nil
}
