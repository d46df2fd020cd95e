package config

import (
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/adhocore/gronx"
	"go.yaml.in/yaml/v3"
)

// Forge is one forges.<name>: where its API is, the token kusaw comments
// and opens pull requests with, and the secret every incoming webhook
// delivery is checked against (docs/intake.md).
type Forge struct {
	Name          string // github, gitlab, gitea
	APIURL        string
	Token         *SecretRef
	WebhookSecret *SecretRef
}

// Trigger is one triggers.<name>: an event of a forge, or a schedule, that
// starts a run of a pipeline with parameters made from the event.
type Trigger struct {
	Name     string
	On       TriggerOn
	Pipeline string
	// Params are templates ({{issue.title}}, ...) by parameter name; the
	// values reach the steps as KUSAW_PARAM_<NAME>, never argv or a path.
	Params     map[string]string
	ParamOrder []string
	// Allow are the forge users who may start this trigger or command its
	// runs; empty: users with write access (GitHub's author association
	// OWNER, MEMBER or COLLABORATOR; on GitLab and Gitea allow is needed).
	Allow []string
}

// TriggerOn is what a trigger waits for: a forge event or a schedule.
type TriggerOn struct {
	Forge string // github, gitlab, gitea; "" for a schedule
	Repo  string // OWNER/NAME (GitLab: the project's path)
	Event string // one of TriggerEvents
	Label string // issues.labeled: only this label
	State string // pull_request_review.submitted: changes_requested, approved, commented
	// Schedule is a five-field cron expression (or @hourly, @daily, ...)
	// in UTC.
	Schedule string
}

// Forge names and the events a trigger may name. The names are the same
// for every forge (docs/intake.md maps each forge's own).
var (
	ForgeNames    = []string{"github", "gitlab", "gitea"}
	TriggerEvents = []string{"issues.opened", "issues.labeled", "issue_comment.created", "pull_request_review.submitted"}
	ReviewStates  = []string{"changes_requested", "approved", "commented"}
	// TriggerFields are what a trigger's params may name in {{...}}.
	TriggerFields = []string{"issue.number", "issue.title", "issue.body", "issue.url", "comment.body",
		"review.state", "review.body", "review.comments", "pull_request.number", "pull_request.branch",
		"sender", "repo", "label", "trigger", "event"}
	triggerKeys  = []string{"on", "pipeline", "params", "allow"}
	onKeys       = []string{"forge", "repo", "event", "label", "state", "schedule"}
	templateRefs = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`) })
)

// DefaultForgeAPI is each forge's API when forges.<name>.api_url is not
// written (GitLab and Gitea are self-hosted: they need it).
var DefaultForgeAPI = map[string]string{"github": "https://api.github.com"}

func (d *decoder) forges(f *Factory, n *yaml.Node) {
	for _, kv := range d.fields(n, "forges", nil) {
		kp := join("forges", kv.key)
		if !contains(ForgeNames, kv.key) {
			d.errf(ECodeForge, kv.keyN, kp, "name one of "+strings.Join(ForgeNames, ", "), "forges.%s: unknown forge %q", kv.key, kv.key)
			continue
		}
		fg := &Forge{Name: kv.key}
		for _, fl := range d.fields(kv.value, kp, []string{"api_url", "token", "webhook_secret"}) {
			p := join(kp, fl.key)
			switch fl.key {
			case "api_url":
				fg.APIURL = d.str(fl.value, p)
				d.checkURL(fl.value, p, fg.APIURL)
			case "token":
				fg.Token = d.secretRef(fl.value, p)
			case "webhook_secret":
				fg.WebhookSecret = d.secretRef(fl.value, p)
			}
		}
		if fg.APIURL == "" {
			fg.APIURL = DefaultForgeAPI[fg.Name]
		}
		if fg.APIURL == "" {
			d.errf(ECodeMissing, kv.value, join(kp, "api_url"), "write api_url: the forge's API, e.g. https://gitlab.example.com/api/v4", "%s needs api_url", kp)
		}
		if f.Forges == nil {
			f.Forges = map[string]*Forge{}
		}
		f.Forges[fg.Name] = fg
	}
}

func (d *decoder) triggers(f *Factory, n *yaml.Node) {
	for _, kv := range d.fields(n, "triggers", nil) {
		kp := join("triggers", kv.key)
		if !idPattern().MatchString(kv.key) {
			d.errf(ECodeBadName, kv.keyN, kp, "a trigger name is a letter or digit, then letters, digits, '_', '.' or '-'", "trigger name %q is not valid", kv.key)
			continue
		}
		t := &Trigger{Name: kv.key, Params: map[string]string{}}
		var onN, pipeN *yaml.Node
		for _, fl := range d.fields(kv.value, kp, triggerKeys) {
			p := join(kp, fl.key)
			switch fl.key {
			case "on":
				onN = fl.value
				t.On = d.triggerOn(fl.value, p)
			case "pipeline":
				pipeN = fl.value
				t.Pipeline = d.str(fl.value, p)
			case "params":
				for _, pv := range d.fields(fl.value, p, nil) {
					pp := join(p, pv.key)
					if !envNamePattern().MatchString(pv.key) || len(pv.key) > 64 {
						d.errf(ECodeBadName, pv.keyN, pp, "a parameter name is letters, digits and _ (not first), at most 64", "parameter name %q is not valid", pv.key)
						continue
					}
					t.Params[pv.key] = d.str(pv.value, pp)
					t.ParamOrder = append(t.ParamOrder, pv.key)
					d.checkTemplate(pv.value, pp, t.Params[pv.key])
				}
			case "allow":
				t.Allow, _ = d.strList(fl.value, p)
			}
		}
		if onN == nil {
			d.errf(ECodeMissing, kv.value, join(kp, "on"), "write on: {forge: github, repo: OWNER/NAME, event: issues.labeled} or on: {schedule: \"0 3 * * *\"}", "%s needs on:", kp)
		}
		if pipeN == nil {
			d.errf(ECodeMissing, kv.value, join(kp, "pipeline"), "write pipeline: NAME", "%s needs pipeline:", kp)
		}
		if f.Triggers == nil {
			f.Triggers = map[string]*Trigger{}
		}
		f.Triggers[t.Name] = t
		f.TriggerOrder = append(f.TriggerOrder, t.Name)
	}
}

func (d *decoder) triggerOn(n *yaml.Node, kp string) TriggerOn {
	var on TriggerOn
	var schedN *yaml.Node
	for _, fl := range d.fields(n, kp, onKeys) {
		p := join(kp, fl.key)
		switch fl.key {
		case "forge":
			on.Forge = d.enum(fl.value, p, ForgeNames...)
		case "repo":
			on.Repo = d.str(fl.value, p)
		case "event":
			on.Event = d.enum(fl.value, p, TriggerEvents...)
		case "label":
			on.Label = d.str(fl.value, p)
		case "state":
			on.State = d.enum(fl.value, p, ReviewStates...)
		case "schedule":
			schedN = fl.value
			on.Schedule = d.str(fl.value, p)
		}
	}
	switch {
	case on.Schedule != "":
		if on.Forge != "" || on.Event != "" || on.Repo != "" {
			d.errf(ECodeTrigger, n, kp, "write either {schedule: ...} or {forge, repo, event}", "%s: a schedule cannot also name a forge event", kp)
		}
		if !gronx.New().IsValid(on.Schedule) {
			d.errf(ECodeTrigger, schedN, join(kp, "schedule"), `write five fields "minute hour day month weekday" in UTC, e.g. "0 3 * * *", or @hourly, @daily, @weekly`, "%s: %q is not a cron schedule", join(kp, "schedule"), on.Schedule)
		}
	case resolve(n) != nil && resolve(n).Kind == yaml.MappingNode:
		for _, req := range []struct{ key, val, fix string }{
			{"forge", on.Forge, "forge: github (or gitlab, gitea)"},
			{"repo", on.Repo, "repo: OWNER/NAME"},
			{"event", on.Event, "event: " + strings.Join(TriggerEvents, " | ")},
		} {
			if req.val == "" {
				d.errf(ECodeMissing, n, join(kp, req.key), "write "+req.fix, "%s needs %s (or schedule:)", kp, req.key)
			}
		}
		if on.Label != "" && on.Event != "issues.labeled" {
			d.errf(ECodeTrigger, n, join(kp, "label"), "label: goes with event: issues.labeled", "%s: label is only for issues.labeled", kp)
		}
		if on.State != "" && on.Event != "pull_request_review.submitted" {
			d.errf(ECodeTrigger, n, join(kp, "state"), "state: goes with event: pull_request_review.submitted", "%s: state is only for pull_request_review.submitted", kp)
		}
	}
	return on
}

// checkTemplate refuses a {{...}} that names no field of an event.
func (d *decoder) checkTemplate(n *yaml.Node, kp, s string) {
	for _, m := range templateRefs().FindAllStringSubmatch(s, -1) {
		if !contains(TriggerFields, m[1]) {
			fix := "name one of " + strings.Join(TriggerFields, ", ")
			if c := closest(m[1], TriggerFields); c != "" {
				fix = "did you mean {{" + c + "}}?"
			}
			d.errf(ECodeTrigger, n, kp, fix, "%s: {{%s}} is not a field of an event", kp, m[1])
		}
	}
}

// intakeChecks are the rules between triggers, forges and pipelines.
func (d *decoder) intakeChecks(f *Factory) {
	for _, name := range f.TriggerOrder {
		t := f.Triggers[name]
		kp := join("triggers", name)
		if t.Pipeline != "" && f.Pipelines[t.Pipeline] == nil {
			fix := "name one of the pipelines: " + strings.Join(f.PipelineOrder, ", ")
			if c := closest(t.Pipeline, f.PipelineOrder); c != "" {
				fix = "did you mean " + c + "?"
			}
			d.errf(ECodeTrigger, f.posNode(join(kp, "pipeline")), join(kp, "pipeline"), fix, "%s names unknown pipeline %q", kp, t.Pipeline)
		}
		if fg := t.On.Forge; fg != "" {
			if f.Forges[fg] == nil || f.Forges[fg].WebhookSecret == nil {
				d.errf(ECodeForge, f.posNode(join(kp, "on.forge"), join(kp, "on")), join(kp, "on.forge"),
					"add forges: {"+fg+": {webhook_secret: {secret: "+fg+"_hook}}} and store it: kusaw config set forges."+fg+".webhook_secret --secret",
					"%s listens to %s, but forges.%s.webhook_secret is not set: no delivery could be checked", kp, fg, fg)
			}
			if fg != "github" && len(t.Allow) == 0 {
				d.errf(ECodeTrigger, f.posNode(join(kp, "on")), join(kp, "allow"), "list the users who may start it: allow: [alice, bob]",
					"%s: %s's webhooks do not say whether the sender may write to the repository, so allow: is needed", kp, fg)
			}
		}
	}
}

// TriggerOrderFor lists the triggers that listen to a forge, in written
// order.
func (f *Factory) TriggerOrderFor(forge string) []*Trigger {
	var out []*Trigger
	for _, name := range f.TriggerOrder {
		if t := f.Triggers[name]; t.On.Forge == forge {
			out = append(out, t)
		}
	}
	return out
}

// Schedules are the triggers with a schedule, sorted by name.
func (f *Factory) Schedules() []*Trigger {
	var out []*Trigger
	for _, t := range f.Triggers {
		if t.On.Schedule != "" {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ExpandTemplate fills a trigger param's {{field}} references from vals;
// an unknown or empty field becomes "". The result is plain text: nothing
// in it is interpreted again.
func ExpandTemplate(tmpl string, vals map[string]string) string {
	return templateRefs().ReplaceAllStringFunc(tmpl, func(m string) string {
		sub := templateRefs().FindStringSubmatch(m)
		return vals[sub[1]]
	})
}

func forgesNode() *schemaNode {
	forge := object("one forge: its API, the token kusaw comments and opens pull requests with, the secret webhooks are checked against",
		p("api_url", text("the forge's API address (github: https://api.github.com by default; GitLab and Gitea: theirs, e.g. https://gitlab.example.com/api/v4)")),
		p("token", secretRefNode("the forge token, from the secret store")),
		p("webhook_secret", secretRefNode("the secret every incoming webhook delivery is signed with, from the secret store")),
	)
	n := mapOf("the forges kusaw takes work from and delivers to, by name: "+strings.Join(ForgeNames, ", "), "^("+strings.Join(ForgeNames, "|")+")$", forge)
	n.values = ForgeNames
	return n
}

func triggerNode() *schemaNode {
	params := mapOf("parameters made from the event, by name ({{issue.title}}, {{issue.body}}, ...): the steps get them as KUSAW_PARAM_<NAME>, an agent's prompt as {{params.NAME}}; fields: "+strings.Join(TriggerFields, ", "),
		envNamePatternText, text("a template"))
	on := object("the event or schedule that starts the trigger",
		p("forge", enum("the forge the event comes from", ForgeNames...)),
		p("repo", text("OWNER/NAME on the forge (GitLab: the project's path)")),
		p("event", enum("the event", TriggerEvents...)),
		p("label", text("issues.labeled: only this label")),
		p("state", enum("pull_request_review.submitted: only reviews in this state", ReviewStates...)),
		p("schedule", text(`a five-field cron schedule in UTC ("0 3 * * *") or @hourly, @daily, @weekly, @monthly`)),
	)
	t := object("one trigger",
		p("on", on),
		p("pipeline", text("the pipeline it runs")),
		p("params", params),
		p("allow", list("the forge users who may start it or command its runs (default on GitHub: users with write access)")),
	)
	t.required = []string{"on", "pipeline"}
	return t
}

var paramRefs = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`) })

// ExpandParams fills an agent prompt's {{params.NAME}} from the run's
// parameters ("" for one the run lacks). Nothing else in the prompt is
// touched, and a value is not expanded again.
func ExpandParams(prompt string, params map[string]string) string {
	if !strings.Contains(prompt, "{{") {
		return prompt
	}
	return paramRefs().ReplaceAllStringFunc(prompt, func(m string) string {
		return params[paramRefs().FindStringSubmatch(m)[1]]
	})
}
