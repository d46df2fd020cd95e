package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// Deliver is pipelines.<name>.deliver: where a successful run's work goes.
// It runs outside every sandbox with the user's own git and credentials.
type Deliver struct {
	Repo        string // the factory repo delivered; "" means the only one
	Merge       *DeliverMerge
	Push        *DeliverPush
	PullRequest *DeliverPullRequest
}

// DeliverMerge merges the run branch into a local branch.
type DeliverMerge struct {
	Into string
	How  string // ff-only (default), merge, squash
}

// DeliverPush pushes the run branch to a remote.
type DeliverPush struct {
	Remote string
	Branch string // a template: {run} is the run id, {pipeline} its pipeline
}

// DeliverPullRequest opens or updates one pull request per run.
type DeliverPullRequest struct {
	Forge    string // github, gitlab, gitea
	APIURL   string
	Repo     string // OWNER/NAME on the forge
	Base     string
	Token    *SecretRef
	Title    string
	BodyFile string // absolute; "" means a summary of the run
}

// DefaultPushBranch is the remote branch a run is pushed to.
const DefaultPushBranch = "kusaw/{run}"

var (
	deliverKeys = []string{"repo", "merge", "push", "pull_request"}
	mergeHows   = []string{"ff-only", "merge", "squash"}
	forges      = []string{"github", "gitlab", "gitea"}
	defaultAPI  = map[string]string{"github": "https://api.github.com"}
)

func (d *decoder) deliver(f *Factory, n *yaml.Node, path string) *Deliver {
	dl := &Deliver{}
	for _, fl := range d.fields(n, path, deliverKeys) {
		kp := join(path, fl.key)
		switch fl.key {
		case "repo":
			dl.Repo = d.str(fl.value, kp)
			if _, ok := f.Repos[dl.Repo]; dl.Repo != "" && !ok {
				d.errf(ECodeUnknownRepo, fl.value, kp, "name one of repos: "+strings.Join(f.RepoOrder, ", "), "%s names unknown repo %q", kp, dl.Repo)
			}
		case "merge":
			m := &DeliverMerge{How: "ff-only"}
			for _, mf := range d.fields(fl.value, kp, []string{"into", "how"}) {
				mp := join(kp, mf.key)
				switch mf.key {
				case "into":
					m.Into = d.str(mf.value, mp)
				case "how":
					m.How = d.enum(mf.value, mp, mergeHows...)
				}
			}
			if m.Into == "" {
				d.errf(ECodeMissing, fl.value, kp, "write merge: {into: main}", "%s needs into: the branch to merge the run into", kp)
			}
			dl.Merge = m
		case "push":
			pu := &DeliverPush{Branch: DefaultPushBranch}
			for _, pf := range d.fields(fl.value, kp, []string{"remote", "branch"}) {
				pp := join(kp, pf.key)
				switch pf.key {
				case "remote":
					pu.Remote = d.str(pf.value, pp)
				case "branch":
					pu.Branch = d.str(pf.value, pp)
				}
			}
			if pu.Remote == "" {
				d.errf(ECodeMissing, fl.value, kp, "write push: {remote: origin}", "%s needs remote: the git remote to push to", kp)
			}
			dl.Push = pu
		case "pull_request":
			dl.PullRequest = d.pullRequest(f, fl.value, kp)
		}
	}
	if dl.Repo == "" && len(f.RepoOrder) > 1 {
		d.errf(ECodeMissing, n, path, "add repo: NAME (one of "+strings.Join(f.RepoOrder, ", ")+")", "%s must name the repo it delivers: the factory has %d", path, len(f.RepoOrder))
	}
	if dl.PullRequest != nil && dl.Push == nil {
		d.errf(ECodeMissing, n, join(path, "pull_request"), "add push: {remote: origin}", "%s: a pull request needs the run's branch pushed (push:)", path)
	}
	return dl
}

func (d *decoder) pullRequest(f *Factory, n *yaml.Node, path string) *DeliverPullRequest {
	pr := &DeliverPullRequest{}
	for _, fl := range d.fields(n, path, []string{"forge", "api_url", "repo", "base", "token", "title", "body_file"}) {
		kp := join(path, fl.key)
		switch fl.key {
		case "forge":
			pr.Forge = d.enum(fl.value, kp, forges...)
		case "api_url":
			pr.APIURL = d.str(fl.value, kp)
			d.checkURL(fl.value, kp, pr.APIURL)
		case "repo":
			pr.Repo = d.str(fl.value, kp)
		case "base":
			pr.Base = d.str(fl.value, kp)
		case "token":
			pr.Token = d.secretRef(fl.value, kp)
		case "title":
			pr.Title = d.str(fl.value, kp)
		case "body_file":
			pr.BodyFile = f.abs(d.str(fl.value, kp))
		}
	}
	// forges.<name> holds a forge's API and token once for delivery and
	// intake; what the pull request writes itself wins.
	if fg := f.Forges[pr.Forge]; fg != nil {
		if pr.APIURL == "" {
			pr.APIURL = fg.APIURL
		}
		if pr.Token == nil {
			pr.Token = fg.Token
		}
	}
	if pr.APIURL == "" {
		pr.APIURL = defaultAPI[pr.Forge]
	}
	for _, req := range []struct{ key, val, fix string }{
		{"forge", pr.Forge, "forge: github (or gitlab, gitea)"},
		{"api_url", pr.APIURL, "api_url: https://gitlab.example.com/api/v4 (github defaults to https://api.github.com)"},
		{"repo", pr.Repo, "repo: OWNER/NAME"},
		{"base", pr.Base, "base: main"},
	} {
		if req.val == "" {
			d.errf(ECodeMissing, n, join(path, req.key), "write "+req.fix, "%s needs %s", path, req.key)
		}
	}
	if pr.Token == nil {
		d.errf(ECodeMissing, n, join(path, "token"), "kusaw config set "+join(path, "token")+" --secret", "%s needs token: {secret: KEY}", path)
	}
	return pr
}
