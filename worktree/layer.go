package worktree

import (
	"path/filepath"
	"sort"
	"strings"
)

// NoteWritten records paths kusaw itself writes into the tree before the
// step (included files, the sandbox's stand-in mount points), relative to
// the tree or absolute in it: a write layer's survey has Release remove
// them (with the folders made for them), as the cleaning walk would have.
func (w *Worktree) NoteWritten(paths ...string) {
	for _, p := range paths {
		if filepath.IsAbs(p) {
			rel, err := filepath.Rel(w.Path, p)
			if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
				continue
			}
			p = rel
		}
		w.noted = append(w.noted, filepath.ToSlash(filepath.Clean(p)))
	}
}

// Layered: the tree's changes are known from its write layer (ApplyLayer
// succeeded); the commit and Release walk nothing, and no nested .git can
// be in the tree (the layer's are dropped).
func (w *Worktree) Layered() bool { return w.layerSurvey != nil }

// layerSurveyOf is the survey of the tree after a write layer whose
// entries (in the order applied: each folder before what is in it) were
// applied: what is staged (changed, untracked), what Release removes
// (everything the layer or kusaw put in the tree, the tree's .git), the
// tracked folders whose mode Release resets, and the tracked entries the
// next take checks out again (restore).
func (w *Worktree) layerSurveyOf(ents []layerEntry) (*survey, error) {
	dirMode := 0o777 &^ processUmask()
	sv := &survey{layer: true, remove: []string{".git"}}
	if len(ents) == 1 && len(w.noted) == 0 {
		// The root alone (a step that changed nothing): neither the
		// index nor a lookup of every path is needed for it.
		if ents[0].mode != dirMode {
			sv.folders = append(sv.folders, "")
		}
		return sv, nil
	}
	idx, err := w.trusted()
	if err != nil {
		return nil, err
	}
	files, dirs := idx.lookup()
	whole := map[string]bool{} // paths staged and removed with all below them
	covered := func(p string) bool {
		for len(whole) > 0 {
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				return false
			}
			if p = p[:i]; whole[p] {
				return true
			}
		}
		return false
	}
	// below: the index's entries under folder p (contiguous: sorted).
	below := func(p string) []string {
		pre := p + "/"
		i := sort.Search(len(idx.entries), func(i int) bool { return idx.entries[i].name >= pre })
		var out []string
		for ; i < len(idx.entries) && strings.HasPrefix(idx.entries[i].name, pre); i++ {
			out = append(out, idx.entries[i].name)
		}
		return out
	}
	for _, e := range ents {
		p := e.path
		if p != "" && covered(p) {
			continue
		}
		_, tracked := files[p]
		switch {
		case e.kind == 'd' && dirs[p]:
			if e.mode != dirMode {
				sv.folders = append(sv.folders, p)
			}
		case dirs[p]: // a tracked folder made anew, replaced by a file, or gone
			sv.changed = append(sv.changed, p)
			whole[p] = true
			if e.kind != 'x' {
				sv.remove = append(sv.remove, p)
			}
			sv.restore = append(sv.restore, below(p)...)
		case tracked:
			sv.changed = append(sv.changed, p)
			if e.kind != 'x' {
				sv.remove = append(sv.remove, p)
			}
			if e.kind == 'd' || e.kind == 'D' {
				whole[p] = true
			}
			sv.restore = append(sv.restore, p)
		case e.kind == 'x': // an untracked path gone: nothing of it left
		default:
			sv.untracked = append(sv.untracked, p)
			sv.remove = append(sv.remove, p)
			if e.kind != 'f' {
				whole[p] = true
			}
		}
	}
	// What kusaw wrote: the outermost path of each the checkout lacks.
	for _, n := range w.noted {
		if !validIndexPath(n) {
			continue
		}
		q := ""
		for _, part := range strings.Split(n, "/") {
			if q != "" {
				q += "/"
			}
			q += part
			if !dirs[q] {
				break
			}
		}
		if dirs[q] || covered(q) || whole[q] {
			continue
		}
		sv.remove = append(sv.remove, q)
		if _, ok := files[q]; ok {
			sv.restore = append(sv.restore, q)
		}
	}
	sv.remove = uniq(sv.remove)
	sv.restore = uniq(sv.restore)
	return sv, nil
}

func uniq(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := s[:0]
	for _, p := range s {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// LayerChanged counts the paths the applied write layer changed (to
// stage: tracked paths changed or gone, and new ones), 0 without one.
func (w *Worktree) LayerChanged() int {
	if w.layerSurvey == nil {
		return 0
	}
	return len(w.layerSurvey.changed) + len(w.layerSurvey.untracked)
}
