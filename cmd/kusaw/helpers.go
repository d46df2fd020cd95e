package main

import (
	"fmt"
	"sort"

	"github.com/kusaw/kusaw/record"
)

// helperPlaces says where each helper's attempt is shown among the run's
// own: a fixer after the failed attempt it ran on, a judge after the
// candidates it chose among, a resolve after the parallel group whose
// merge it finished; one with no role (a record from before roles were
// recorded) or whose place is gone goes last. Within a place, helpers keep
// the order they ran.
type helperPlaces struct {
	afterAttempt map[string][]*record.AttemptRecord // "step/n"
	afterStep    map[string][]*record.AttemptRecord
	afterGroup   map[int][]*record.AttemptRecord
	last         []*record.AttemptRecord
}

func attemptKey(step string, n int) string { return fmt.Sprintf("%s/%d", step, n) }

func placeHelpers(r *record.RunRecord, own, helpers []*record.AttemptRecord) *helperPlaces {
	p := &helperPlaces{afterAttempt: map[string][]*record.AttemptRecord{}, afterStep: map[string][]*record.AttemptRecord{}, afterGroup: map[int][]*record.AttemptRecord{}}
	ownKeys := map[string]bool{}
	for _, a := range own {
		ownKeys[attemptKey(a.Step, a.Number)] = true
	}
	steps, groups := map[string]bool{}, map[int]bool{}
	for _, s := range r.Steps {
		steps[s.ID] = true
		groups[s.Group] = s.Group > 0
	}
	for _, h := range helpers {
		ro := h.Role
		switch {
		case ro == nil:
			p.last = append(p.last, h)
		case ro.Kind == record.RoleFixer && ownKeys[attemptKey(ro.For, ro.After)]:
			k := attemptKey(ro.For, ro.After)
			p.afterAttempt[k] = append(p.afterAttempt[k], h)
		case ro.Kind == record.RoleResolve && groups[ro.Group]:
			p.afterGroup[ro.Group] = append(p.afterGroup[ro.Group], h)
		case steps[ro.For]:
			p.afterStep[ro.For] = append(p.afterStep[ro.For], h)
		default:
			p.last = append(p.last, h)
		}
	}
	return p
}

// take returns the helpers of a place once: a step listed twice shows
// them after its first occurrence.
func take[K comparable](m map[K][]*record.AttemptRecord, k K) []*record.AttemptRecord {
	v := m[k]
	delete(m, k)
	return v
}

// runOrder is every attempt of a run in the order views list them: the
// pipeline's steps in order, each step's attempts by number, and each
// helper at its place (placeHelpers).
func runOrder(r *record.RunRecord, own, helpers []*record.AttemptRecord) []*record.AttemptRecord {
	p := placeHelpers(r, own, helpers)
	var out []*record.AttemptRecord
	seen := map[string]bool{}
	for i, s := range r.Steps {
		if !seen[s.ID] {
			seen[s.ID] = true
			for _, a := range own {
				if a.Step == s.ID {
					out = append(out, a)
					out = append(out, take(p.afterAttempt, attemptKey(a.Step, a.Number))...)
				}
			}
		}
		out = append(out, take(p.afterStep, s.ID)...)
		if s.Group > 0 && (i == len(r.Steps)-1 || r.Steps[i+1].Group != s.Group) {
			out = append(out, take(p.afterGroup, s.Group)...)
		}
	}
	return append(out, p.leftover()...)
}

// leftover is what no place took, in the order it ran.
func (p *helperPlaces) leftover() []*record.AttemptRecord {
	var out []*record.AttemptRecord
	for _, m := range []map[string][]*record.AttemptRecord{p.afterAttempt, p.afterStep} {
		for _, v := range m {
			out = append(out, v...)
		}
	}
	for _, v := range p.afterGroup {
		out = append(out, v...)
	}
	out = append(out, p.last...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// helperLabel is how a view names a helper's attempt.
func helperLabel(a *record.AttemptRecord) string {
	if a.Role != nil {
		return a.Role.Label
	}
	return "helper step " + a.Step
}
