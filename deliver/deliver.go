// Package deliver takes a finished run's work where it should go: merged
// into a local branch, pushed to a remote, and proposed as a pull request
// through a forge's REST API. It runs outside every sandbox with the
// user's own git and credentials, after the run succeeded, and each of its
// steps is idempotent so that `kusaw deliver RUN` can be run again.
//
// It knows nothing of runs or records: the caller hands it a Plan (plain
// data) and receives what happened through Observer.
package deliver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// How a run branch is merged into its target.
const (
	HowFFOnly = "ff-only"
	HowMerge  = "merge"
	HowSquash = "squash"
)

// Forges with a pull request API.
const (
	ForgeGitHub = "github"
	ForgeGitLab = "gitlab"
	ForgeGitea  = "gitea"
)

// Plan is one delivery: a run branch of one local repository and what to do
// with it. Steps left nil are not done.
type Plan struct {
	RunID     string
	RepoPath  string   // the local repository
	RunBranch string   // e.g. kusaw/<run-id>
	Identity  []string // git -c options for kusaw's own commits (user.name, user.email)

	Merge       *Merge
	Push        *Push
	PullRequest *PullRequest
}

// Merge merges the run branch into a local branch.
type Merge struct {
	Into string
	How  string // HowFFOnly (default), HowMerge, HowSquash
	// Message is the commit message of a merge or squash commit.
	Message string
}

// Push pushes the run branch to a remote under a branch name.
type Push struct {
	Remote string
	Branch string // the remote branch (a template already expanded)
}

// PullRequest opens, or updates, one pull request for the run's pushed
// branch.
type PullRequest struct {
	Forge  string // ForgeGitHub, ForgeGitLab or ForgeGitea
	APIURL string // e.g. https://api.github.com, https://gitlab.example/api/v4
	Repo   string // OWNER/NAME (GitLab: the project's path)
	Base   string // the branch the pull request targets
	Head   string // the pushed branch
	Token  string // never logged
	Title  string
	Body   string
	// Client is the HTTP client; nil means one with a 30s timeout.
	Client *http.Client
}

// Observer receives each step's outcome: "merged", "pushed" or
// "pull_request" with its data (no secrets), or the step's error.
type Observer func(step string, data map[string]any, err error)

// Result is what a delivery did.
type Result struct {
	Merged     string // the commit the target branch now points at
	Pushed     string // remote/branch
	PullURL    string
	PullNumber int
	Created    bool // the pull request was opened now, not updated
}

// ErrConflict is returned (wrapped, with the files) when a merge conflicts.
var ErrConflict = errors.New("the run branch does not merge cleanly")

// StepError says which delivery step failed.
type StepError struct {
	Step string // "merge", "push" or "pull_request"
	Err  error
}

func (e *StepError) Error() string { return "deliver " + e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// Run does the plan's steps in order (merge, push, pull request) and stops
// at the first that fails. obs may be nil.
func Run(ctx context.Context, p Plan, obs Observer) (Result, error) {
	if obs == nil {
		obs = func(string, map[string]any, error) {}
	}
	var res Result
	if p.Merge != nil {
		sha, already, err := merge(ctx, p)
		if err != nil {
			obs("merge", map[string]any{"into": p.Merge.Into, "how": how(p.Merge)}, err)
			return res, &StepError{"merge", err}
		}
		res.Merged = sha
		obs("merged", map[string]any{"into": p.Merge.Into, "how": how(p.Merge), "commit": sha, "already": already}, nil)
	}
	if p.Push != nil {
		if err := push(ctx, p); err != nil {
			obs("push", map[string]any{"remote": p.Push.Remote, "branch": p.Push.Branch}, err)
			return res, &StepError{"push", err}
		}
		res.Pushed = p.Push.Remote + "/" + p.Push.Branch
		obs("pushed", map[string]any{"remote": p.Push.Remote, "branch": p.Push.Branch}, nil)
	}
	if p.PullRequest != nil {
		pr := *p.PullRequest
		if pr.Head == "" && p.Push != nil {
			pr.Head = p.Push.Branch
		}
		url, num, created, err := openPullRequest(ctx, pr)
		if err != nil {
			obs("pull_request", map[string]any{"forge": pr.Forge, "repo": pr.Repo, "base": pr.Base, "head": pr.Head}, err)
			return res, &StepError{"pull_request", err}
		}
		res.PullURL, res.PullNumber, res.Created = url, num, created
		obs("pull_request", map[string]any{"forge": pr.Forge, "repo": pr.Repo, "base": pr.Base, "head": pr.Head, "url": url, "number": num, "created": created}, nil)
	}
	return res, nil
}

func how(m *Merge) string {
	if m.How == "" {
		return HowFFOnly
	}
	return m.How
}

func (pr PullRequest) client() *http.Client {
	if pr.Client != nil {
		return pr.Client
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// Validate checks a plan's fields for values the steps cannot use.
func (p Plan) Validate() error {
	if p.Merge != nil {
		switch how(p.Merge) {
		case HowFFOnly, HowMerge, HowSquash:
		default:
			return fmt.Errorf("merge.how %q is not ff-only, merge or squash", p.Merge.How)
		}
		if p.Merge.Into == "" {
			return errors.New("merge.into names no branch")
		}
	}
	if p.PullRequest != nil {
		switch p.PullRequest.Forge {
		case ForgeGitHub, ForgeGitLab, ForgeGitea:
		default:
			return fmt.Errorf("pull_request.forge %q is not github, gitlab or gitea", p.PullRequest.Forge)
		}
	}
	return nil
}
