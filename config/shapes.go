package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Pipeline shapes on a step: retry rules, fix loops, candidates, parallel
// group settings and approval gates (docs/pipelines.md).

// RetryOn is one entry of retry.on: an outcome or reason class, or a set of
// exit codes.
type RetryOn struct {
	Kind  string // one of RetryKinds, or "exit"
	Codes []int  // exit codes for Kind "exit"
}

// RetryKinds are the words retry.on accepts besides exit:CODE[,CODE].
var RetryKinds = []string{"failed", "timeout", "provider_error", "lost", "sandbox_unavailable"}

// String is the entry as written.
func (o RetryOn) String() string {
	if o.Kind != "exit" {
		return o.Kind
	}
	cs := make([]string, len(o.Codes))
	for i, c := range o.Codes {
		cs[i] = strconv.Itoa(c)
	}
	return "exit:" + strings.Join(cs, ",")
}

// Retry is a step's retry rule. Attempts is the most attempts (the step's
// attempts); On empty means "retry on any failure" (attempts: N alone).
type Retry struct {
	On      []RetryOn
	Backoff time.Duration
}

// Select is how a step with candidates keeps one.
type Select string

const (
	SelectFirst Select = "first"
	SelectAll   Select = "all"
	SelectJudge Select = "judge"
)

// Gate is an approval gate before a step runs.
type Gate struct {
	Message   string
	Timeout   time.Duration // 0: waits until decided
	Approvers []string      // empty: anyone who may reach kusaw
}

// Notify is one webhook: where, on which events, signed with which secret.
type Notify struct {
	URL    string
	On     []string
	Secret *SecretRef
}

// NotifyEvents are the events a webhook may ask for.
var NotifyEvents = []string{"run.finished", "run.waiting", "step.failed"}

// Shape keys a step may have beside its own.
var shapeKeys = []string{"retry", "candidates", "select", "on_failure", "continue_on_failure", "resolve", "gate", "continue_session"}

// stepShape decodes one shape key of a step; false if key is not one.
func (d *decoder) stepShape(s *Step, key string, n *yaml.Node, kp string) bool {
	switch key {
	case "retry":
		d.retry(s, n, kp)
	case "candidates":
		if resolve(n).Kind == yaml.SequenceNode {
			d.candidateList(s, n, kp)
			break
		}
		s.Candidates = d.integer(n, kp)
		if s.Candidates < 2 || s.Candidates > 10 {
			d.errf(ECodeBadValue, n, kp, "use a number from 2 to 10, or remove candidates", "%s must be from 2 to 10", kp)
			s.Candidates = 0
		}
	case "select":
		v := d.str(n, kp)
		switch {
		case v == string(SelectFirst), v == string(SelectAll):
			s.Select = Select(v)
		case strings.HasPrefix(v, "judge:") && len(v) > len("judge:"):
			s.Select, s.Judge = SelectJudge, strings.TrimPrefix(v, "judge:")
		default:
			d.errf(ECodeBadValue, n, kp, "write first, all, or judge:STEP", "%s: %q is not first, all or judge:STEP", kp, v)
		}
	case "on_failure":
		s.OnFailure = d.str(n, kp)
	case "continue_on_failure":
		s.ContinueOnFailure = d.boolean(n, kp)
	case "continue_session":
		s.ContinueSession = d.boolean(n, kp)
	case "resolve":
		s.Resolve = d.str(n, kp)
	case "gate":
		s.Gate = d.gate(n, kp)
	default:
		return false
	}
	return true
}

// retry reads retry: {attempts, on, backoff}.
func (d *decoder) retry(s *Step, n *yaml.Node, kp string) {
	s.Retry = &Retry{}
	for _, fl := range d.fields(n, kp, []string{"attempts", "on", "backoff"}) {
		p := join(kp, fl.key)
		switch fl.key {
		case "attempts":
			s.Attempts = d.integer(fl.value, p)
			if s.Attempts < 1 || s.Attempts > 100 {
				d.errf(ECodeBadValue, fl.value, p, "use a number from 1 to 100", "%s must be from 1 to 100", p)
				s.Attempts = 1
			}
			s.retryAttempts = true
		case "on":
			words, nodes := d.strList(fl.value, p)
			for i, w := range words {
				o, err := parseRetryOn(w)
				if err != "" {
					d.errf(ECodeRetry, nodes[i], fmt.Sprintf("%s[%d]", p, i), "use "+strings.Join(RetryKinds, ", ")+" or exit:CODE[,CODE]", "%s[%d]: %s", p, i, err)
					continue
				}
				s.Retry.On = append(s.Retry.On, o)
			}
		case "backoff":
			s.Retry.Backoff = d.duration(fl.value, p)
		}
	}
}

func parseRetryOn(w string) (RetryOn, string) {
	if contains(RetryKinds, w) {
		return RetryOn{Kind: w}, ""
	}
	codes, ok := strings.CutPrefix(w, "exit:")
	if !ok {
		return RetryOn{}, fmt.Sprintf("%q is not an outcome kusaw retries on", w)
	}
	o := RetryOn{Kind: "exit"}
	for _, c := range strings.Split(codes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > 255 {
			return RetryOn{}, fmt.Sprintf("%q: exit codes are numbers from 1 to 255", w)
		}
		o.Codes = append(o.Codes, n)
	}
	return o, ""
}

// gate reads gate: "message" or gate: {message, timeout, approvers}.
func (d *decoder) gate(n *yaml.Node, kp string) *Gate {
	g := &Gate{}
	if v := resolve(n); v != nil && v.Kind == yaml.ScalarNode {
		g.Message = d.str(v, kp)
	} else {
		for _, fl := range d.fields(n, kp, []string{"message", "timeout", "approvers"}) {
			p := join(kp, fl.key)
			switch fl.key {
			case "message":
				g.Message = d.str(fl.value, p)
			case "timeout":
				g.Timeout = d.duration(fl.value, p)
			case "approvers":
				g.Approvers, _ = d.strList(fl.value, p)
			}
		}
	}
	if strings.TrimSpace(g.Message) == "" {
		d.errf(ECodeGate, n, kp, `write what the approver decides: gate: "deploy to staging?"`, "%s needs a message", kp)
	}
	return g
}

// notifyList reads notify: [{url, on, secret}].
func (d *decoder) notifyList(n *yaml.Node, kp string) []Notify {
	n = resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		if n != nil {
			d.errf(ECodeType, n, kp, "write a list: [{url: https://..., on: [run.finished]}]", "%s must be a list, not %s", kp, kindName(n))
		}
		return nil
	}
	var out []Notify
	for i, c := range n.Content {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		nt := Notify{}
		var urlN *yaml.Node
		for _, fl := range d.fields(c, ip, []string{"url", "on", "secret"}) {
			p := join(ip, fl.key)
			switch fl.key {
			case "url":
				urlN = fl.value
				nt.URL = d.str(fl.value, p)
				d.checkURL(fl.value, p, nt.URL)
			case "on":
				var nodes []*yaml.Node
				nt.On, nodes = d.strList(fl.value, p)
				for j, ev := range nt.On {
					if !contains(NotifyEvents, ev) {
						d.errf(ECodeBadValue, nodes[j], fmt.Sprintf("%s[%d]", p, j), "events: "+strings.Join(NotifyEvents, ", "), "%s[%d]: unknown event %q", p, j, ev)
					}
				}
			case "secret":
				nt.Secret = d.secretRef(fl.value, p)
			}
		}
		if urlN == nil {
			d.errf(ECodeMissing, c, ip, "add url: https://...", "%s needs a url", ip)
		}
		if len(nt.On) == 0 {
			nt.On = append([]string(nil), NotifyEvents...)
		}
		out = append(out, nt)
	}
	return out
}

// shapeChecks are the rules across steps and pipelines for the shapes.
func (d *decoder) shapeChecks(f *Factory) {
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		p := join("steps", id)
		ref := func(key, target string) {
			if target == "" {
				return
			}
			kp := join(p, key)
			if _, ok := f.Steps[target]; !ok {
				fix := "define steps." + target + ", or fix the name"
				if c := closest(target, f.StepOrder); c != "" {
					fix = "did you mean " + c + "?"
				}
				d.errf(ECodeUnknownStep, f.posNode(kp), kp, fix, "%s names unknown step %q", kp, target)
			} else if target == id {
				d.errf(ECodeShape, f.posNode(kp), kp, "name another step", "%s names the step itself", kp)
			}
		}
		ref("on_failure", s.OnFailure)
		ref("resolve", s.Resolve)
		ref("select", s.Judge)
		if s.Select != "" && s.Candidates == 0 {
			d.errf(ECodeShape, f.posNode(join(p, "select")), join(p, "select"), "add candidates: N (2 to 10), or remove select", "step %s has select but no candidates", id)
		}
		if s.Gate != nil && s.PerRepo {
			d.errf(ECodeGate, f.posNode(join(p, "gate")), join(p, "gate"), "put the gate on a step without per_repo (a gate is one decision for the whole run)", "step %s has a gate and per_repo", id)
		}
		if s.Gate != nil && s.Candidates > 0 {
			d.errf(ECodeGate, f.posNode(join(p, "gate")), join(p, "gate"), "put the gate on a step before this one", "step %s has a gate and candidates: one decision cannot stand before several attempts", id)
		}
		if len(s.CandidateProviders) > 0 && s.Kind() != KindAgent {
			d.errf(ECodeShape, f.posNode(join(p, "candidates")), join(p, "candidates"), "write candidates: N, or give the step a prompt", "step %s is a %s step: candidates that name providers need an agent step", id, s.Kind())
		}
		if s.Candidates > 0 && s.OnFailure != "" {
			d.errf(ECodeShape, f.posNode(join(p, "on_failure")), join(p, "on_failure"), "remove on_failure or candidates", "step %s has both candidates and on_failure", id)
		}
		if s.Retry != nil && !s.retryAttempts && s.Attempts == 1 {
			d.add(SevWarning, WCodeRetryOnce, f.posNode(join(p, "retry")), join(p, "retry"), "add retry.attempts: N (more than 1)", "step %s has retry rules but one attempt: nothing is retried", id)
		}
	}
	for _, name := range f.PipelineOrder {
		pl := f.Pipelines[name]
		inGroup := map[string]string{}
		for i, it := range pl.Steps {
			if it.Group == nil {
				continue
			}
			ip := fmt.Sprintf("pipelines.%s[%d]", name, i)
			if _, ok := f.pos[ip]; !ok {
				ip = fmt.Sprintf("pipelines.%s.steps[%d]", name, i)
			}
			for j, id := range it.Group {
				mp := fmt.Sprintf("%s[%d]", ip, j)
				if prev, ok := inGroup[id]; ok {
					d.errf(ECodeGroup, f.posNode(ip), mp, "keep the step in one group, or copy it under another id", "pipeline %s has step %s in two parallel groups (%s and %s)", name, id, prev, ip)
				}
				inGroup[id] = ip
				s := f.Steps[id]
				if s == nil {
					continue
				}
				if s.Gate != nil {
					d.errf(ECodeGate, f.posNode(join("steps."+id, "gate")), "steps."+id+".gate", "put the gate on a step before the group", "step %s has a gate but runs in a parallel group of pipeline %s", id, name)
				}
				if s.Resolve != "" && j > 0 {
					d.errf(ECodeShape, f.posNode(join("steps."+id, "resolve")), "steps."+id+".resolve", "put resolve on the group's first step ("+it.Group[0]+")", "step %s has resolve but is not the first step of its group in pipeline %s", id, name)
				}
			}
		}
		for i, it := range pl.Steps {
			if it.Step == "" || f.Steps[it.Step] == nil || f.Steps[it.Step].Resolve == "" {
				continue
			}
			_ = i
			d.add(SevWarning, WCodeResolveUnused, f.posNode("steps."+it.Step+".resolve"), "steps."+it.Step+".resolve", "put the step first in a parallel group, or remove resolve", "step %s has resolve but runs alone in pipeline %s: there is nothing to merge", it.Step, name)
		}
	}
}

// candidateList reads candidates as a list of {provider: NAME}: one
// candidate per entry, each run by its provider, so one step can race
// agents and let select pick.
func (d *decoder) candidateList(s *Step, n *yaml.Node, kp string) {
	n = resolve(n)
	if len(n.Content) < 2 || len(n.Content) > 10 {
		d.errf(ECodeBadValue, n, kp, "list from 2 to 10 candidates, e.g. [{provider: claude-code}, {provider: codex}]", "%s must list from 2 to 10 candidates", kp)
		return
	}
	var names []string
	for i, c := range n.Content {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		name := ""
		for _, fl := range d.fields(c, ip, []string{"provider"}) {
			name = d.str(fl.value, join(ip, "provider"))
			if !d.fac.KnowsProvider(name) {
				d.errf(ECodeUnknownProvider, fl.value, join(ip, "provider"), "known providers: "+strings.Join(d.fac.ProviderChoices(), ", "), "unknown provider %q", name)
				return
			}
		}
		if name == "" {
			d.errf(ECodeMissing, c, ip, "write {provider: NAME}", "%s needs a provider", ip)
			return
		}
		names = append(names, name)
	}
	s.Candidates, s.CandidateProviders = len(names), names
}
