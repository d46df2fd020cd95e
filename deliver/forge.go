package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// openPullRequest opens a pull request from Head into Base, or updates the
// title and body of the open one that already exists: one per run branch.
func openPullRequest(ctx context.Context, pr PullRequest) (link string, number int, created bool, err error) {
	if pr.Head == "" || pr.Base == "" || pr.Repo == "" {
		return "", 0, false, errors.New("pull_request needs repo, base and a pushed branch (push:)")
	}
	if pr.Token == "" {
		return "", 0, false, errors.New("pull_request has no token; store one with kusaw config set pipelines.NAME.deliver.pull_request.token --secret")
	}
	f, err := forgeOf(pr)
	if err != nil {
		return "", 0, false, err
	}
	existing, err := f.find(ctx)
	if err != nil {
		return "", 0, false, err
	}
	if existing != 0 {
		link, err = f.update(ctx, existing)
		return link, existing, false, err
	}
	link, number, err = f.create(ctx)
	return link, number, true, err
}

// forge is one forge's REST dialect.
type forge struct {
	pr   PullRequest
	base string // API URL without a trailing slash
	// dialect
	auth   func(h http.Header)
	find   func(ctx context.Context) (int, error)
	update func(ctx context.Context, n int) (string, error)
	create func(ctx context.Context) (string, int, error)
}

func forgeOf(pr PullRequest) (*forge, error) {
	u, err := url.Parse(pr.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("pull_request.api_url %q is not an http(s) URL", pr.APIURL)
	}
	f := &forge{pr: pr, base: strings.TrimRight(pr.APIURL, "/")}
	owner, name, ok := strings.Cut(pr.Repo, "/")
	if pr.Forge != ForgeGitLab && (!ok || owner == "" || name == "" || strings.Contains(name, "/")) {
		return nil, fmt.Errorf("pull_request.repo %q is not OWNER/NAME", pr.Repo)
	}
	switch pr.Forge {
	case ForgeGitHub, ForgeGitea:
		repoPath := f.base + "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name) + "/pulls"
		if pr.Forge == ForgeGitHub {
			f.auth = func(h http.Header) {
				h.Set("Authorization", "Bearer "+pr.Token)
				h.Set("Accept", "application/vnd.github+json")
				h.Set("X-GitHub-Api-Version", "2022-11-28")
			}
		} else {
			f.auth = func(h http.Header) { h.Set("Authorization", "token "+pr.Token) }
		}
		type ref struct {
			Ref string `json:"ref"`
		}
		type pull struct {
			Number  int    `json:"number"`
			HTMLURL string `json:"html_url"`
			Head    ref    `json:"head"`
			Base    ref    `json:"base"`
		}
		f.find = func(ctx context.Context) (int, error) {
			q := url.Values{"state": {"open"}}
			if pr.Forge == ForgeGitHub {
				q.Set("head", owner+":"+pr.Head)
				q.Set("base", pr.Base)
			}
			var list []pull
			if err := f.call(ctx, "GET", repoPath+"?"+q.Encode(), nil, &list); err != nil {
				return 0, err
			}
			for _, p := range list {
				if p.Head.Ref == pr.Head && p.Base.Ref == pr.Base {
					return p.Number, nil
				}
			}
			return 0, nil
		}
		f.update = func(ctx context.Context, n int) (string, error) {
			var p pull
			err := f.call(ctx, "PATCH", fmt.Sprintf("%s/%d", repoPath, n), map[string]any{"title": pr.Title, "body": pr.Body}, &p)
			return p.HTMLURL, err
		}
		f.create = func(ctx context.Context) (string, int, error) {
			var p pull
			err := f.call(ctx, "POST", repoPath, map[string]any{"title": pr.Title, "head": pr.Head, "base": pr.Base, "body": pr.Body}, &p)
			return p.HTMLURL, p.Number, err
		}
	case ForgeGitLab:
		mrs := f.base + "/projects/" + url.PathEscape(pr.Repo) + "/merge_requests"
		f.auth = func(h http.Header) { h.Set("PRIVATE-TOKEN", pr.Token) }
		type mr struct {
			IID    int    `json:"iid"`
			WebURL string `json:"web_url"`
		}
		f.find = func(ctx context.Context) (int, error) {
			q := url.Values{"state": {"opened"}, "source_branch": {pr.Head}, "target_branch": {pr.Base}}
			var list []mr
			if err := f.call(ctx, "GET", mrs+"?"+q.Encode(), nil, &list); err != nil {
				return 0, err
			}
			if len(list) > 0 {
				return list[0].IID, nil
			}
			return 0, nil
		}
		f.update = func(ctx context.Context, n int) (string, error) {
			var m mr
			err := f.call(ctx, "PUT", fmt.Sprintf("%s/%d", mrs, n), map[string]any{"title": pr.Title, "description": pr.Body}, &m)
			return m.WebURL, err
		}
		f.create = func(ctx context.Context) (string, int, error) {
			var m mr
			err := f.call(ctx, "POST", mrs, map[string]any{"source_branch": pr.Head, "target_branch": pr.Base, "title": pr.Title, "description": pr.Body}, &m)
			return m.WebURL, m.IID, err
		}
	default:
		return nil, fmt.Errorf("pull_request.forge %q is not github, gitlab or gitea", pr.Forge)
	}
	return f, nil
}

// call sends one API request. Redirects are not followed: a forge that
// moved gets its new address in api_url, and the token never travels to
// a host the user did not name.
func (f *forge) call(ctx context.Context, method, u string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	f.auth(req.Header)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c := *f.pr.client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %v", method, redactURL(u), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Message any `json:"message"`
		}
		_ = json.Unmarshal(b, &e)
		msg := strings.TrimSpace(fmt.Sprint(e.Message))
		if e.Message == nil {
			msg = strings.TrimSpace(firstLines(string(b), 1))
		}
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			msg = "redirected to " + resp.Header.Get("Location") + "; set api_url to that address"
		}
		return fmt.Errorf("%s %s: %s: %s", method, redactURL(u), resp.Status, msg)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: the answer is not the JSON expected: %v", method, redactURL(u), err)
		}
	}
	return nil
}

// redactURL drops a URL's user information and query from messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(url)"
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}
