package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// worktree adds one worktree, its git folders and its protected files, in
// the order of its parts: the worktree, git's common folder, the branch's
// refs, the worktree's own git folder, its .git file, its settings and hooks.
func (b *builder) worktree(w Worktree) error {
	wt, gd, cd, err := checkWorktree(w)
	if err != nil {
		return err
	}
	if err := b.writeLayer(w, wt); err != nil {
		return err
	}
	if !w.Writable {
		b.readOnlyWorktree(w, wt, cd)
		return nil
	}
	if gd == cd {
		return refuse("let kusaw create a linked worktree (git worktree add)", "worktree %s of repo %s is a main checkout; kusaw sandboxes linked worktrees only", wt, w.Repo)
	}
	b.addBind(&b.writes, "bind", wt, wt, fmt.Sprintf("repo %s's worktree", w.Repo))
	b.commonDir(w, cd)
	if err := b.branchRefs(w, gd, cd); err != nil {
		return err
	}
	b.worktreeGitDir(gd, cd)
	// The linked worktree's .git file: where git looks for the repository.
	dotgit := filepath.Join(wt, ".git")
	if fi, err := os.Lstat(dotgit); err != nil || !fi.Mode().IsRegular() {
		return refuse("recreate the worktree with git worktree add", "%s is not a regular .git file", dotgit)
	}
	b.addBind(&b.protect, "ro-bind", dotgit, dotgit, "the linked worktree's .git file (its pointer to the git folder)")
	if err := b.agentSettings(wt); err != nil {
		return err
	}
	// core.hooksPath, from every config git reads (the factory's own git
	// outside reads the same files).
	return b.hooksPath(wt, b.gitConfigs(filepath.Join(cd, "config"), filepath.Join(gd, "config.worktree")))
}

// checkWorktree checks a worktree's paths and resolves them.
func checkWorktree(w Worktree) (wt, gd, cd string, err error) {
	if w.Path == "" || w.GitDir == "" || w.CommonDir == "" {
		return "", "", "", refuse("pass Path, GitDir and CommonDir of each worktree", "worktree of repo %q is incomplete", w.Repo)
	}
	for _, p := range []string{w.Path, w.GitDir, w.CommonDir} {
		if !filepath.IsAbs(p) {
			return "", "", "", refuse("give absolute paths", "worktree path %q of repo %s is not absolute", p, w.Repo)
		}
	}
	wt, gd, cd = resolve(w.Path), resolve(w.GitDir), resolve(w.CommonDir)
	for _, p := range []string{wt, gd, cd} {
		if !isDir(p) {
			return "", "", "", refuse("create the worktree first (git worktree add)", "%s of repo %s is not a directory", p, w.Repo)
		}
	}
	return wt, gd, cd, nil
}

// readOnlyWorktree shows another repo's worktree (per_repo) read-only.
func (b *builder) readOnlyWorktree(w Worktree, wt, cd string) {
	b.addBind(&b.reads, "ro-bind", wt, wt, fmt.Sprintf("repo %s's worktree, read-only (another repo's attempt writes it)", w.Repo))
	b.addBind(&b.reads, "ro-bind", cd, cd, fmt.Sprintf("repo %s's git folder, read-only", w.Repo))
	if p := filepath.Join(cd, "objects"); b.objDir != "" && isDir(p) && !slices.Contains(b.alts, p) {
		b.alts = append(b.alts, p)
	}
}

// commonDir makes the repository's .git read-only as a whole: config,
// hooks/, info/, packed-refs, modules/, other worktrees' folders, HEAD of
// the user's checkout. Once per repository: a second worktree of the same
// repo must not cover the first one's writable folders again.
func (b *builder) commonDir(w Worktree, cd string) {
	if b.mounted[cd] {
		return
	}
	b.addBind(&b.writes, "ro-bind", cd, cd, fmt.Sprintf("repo %s's git control files (config, hooks/, info/, packed-refs, modules/, worktrees/), read-only", w.Repo))
	p := filepath.Join(cd, "objects")
	switch {
	case isDir(p) && b.objDir != "":
		// Covered by the read-only common dir, loose objects included:
		// git does not re-hash an object it reads, so a replaced one
		// would change history other branches rely on.
		b.alts = append(b.alts, p)
		b.writes[len(b.writes)-1].Reason += "; objects/ too: new objects go to the attempt's private object folder"
	case isDir(p):
		b.addBind(&b.writes, "bind", p, p, "git objects: a commit writes new loose objects")
		// Packs and alternates are never written by a commit: read-only,
		// so the step cannot swap the packed history or point the
		// repository at objects of its own.
		for _, sub := range []string{"pack", "info"} {
			if q := filepath.Join(p, sub); isDir(q) {
				b.addBind(&b.writes, "ro-bind", q, q, "git objects/"+sub+"/: existing packs and alternates stay as they are (git gc inside fails)")
			}
		}
	}
}

// branchRefs makes the attempt's branch movable: its private ref store, or
// only the folder holding its loose ref, so the step cannot move the
// user's branches or tags.
func (b *builder) branchRefs(w Worktree, gd, cd string) error {
	if w.RefStore != "" {
		return b.refStore(w, cd)
	}
	ref := headRef(gd)
	if ref == "" {
		b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("repo %s: HEAD is detached; commits inside move only HEAD", w.Repo))
		return nil
	}
	refFile := filepath.Join(cd, filepath.FromSlash(ref))
	fi, err := os.Lstat(refFile)
	if err != nil || !fi.Mode().IsRegular() {
		b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("repo %s: branch %s has no loose ref file; commits inside cannot move it", w.Repo, ref))
		return nil
	}
	dir := filepath.Dir(refFile)
	why := "the folder of the attempt's branch " + ref + ": a commit moves it"
	if dir == filepath.Join(cd, "refs", "heads") {
		why += " (the branch is at the top of refs/heads, so every branch there is writable)"
	}
	b.addBind(&b.writes, "bind", dir, dir, why)
	if ld := filepath.Join(cd, "logs", filepath.FromSlash(ref)); exists(ld) {
		b.addBind(&b.writes, "bind", filepath.Dir(ld), filepath.Dir(ld), "the reflog folder of the attempt's branch")
	}
	return nil
}

// worktreeGitDir makes the worktree's own git folder writable (index,
// logs/) with the files that point git elsewhere read-only.
func (b *builder) worktreeGitDir(gd, cd string) {
	b.addBind(&b.writes, "bind", gd, gd, "the worktree's own git folder: index, logs/, ORIG_HEAD")
	if headRef(gd) != "" {
		// The worktree stays on the attempt's branch: kusaw's own commit
		// outside follows HEAD, so a HEAD moved to main would land there.
		// Commits, amends and resets still work; checkout of another branch
		// does not.
		h := filepath.Join(gd, "HEAD")
		b.addBind(&b.protect, "ro-bind", h, h, "HEAD of the worktree: it stays on the attempt's branch, which kusaw commits outside")
	}
	for _, f := range []string{"commondir", "gitdir"} {
		if p := filepath.Join(gd, f); exists(p) {
			b.addBind(&b.protect, "ro-bind", p, p, "git control file "+f+" of the worktree's git folder (where git finds the repository)")
		}
	}
	if wc := filepath.Join(gd, "config.worktree"); exists(wc) {
		b.addBind(&b.protect, "ro-bind", wc, wc, "git control file config.worktree")
	} else if gitConfigBool(filepath.Join(cd, "config"), "extensions", "worktreeconfig") {
		b.addEmptyFile(wc, "git control file config.worktree (missing: a read-only empty stand-in so it cannot be created)")
	}
}

// gitConfigs lists the config files git reads, in its order of precedence.
func (b *builder) gitConfigs(local ...string) []string {
	cfgs := []string{"/etc/gitconfig"}
	if b.home != "" {
		cfgs = append(cfgs, filepath.Join(b.home, ".config", "git", "config"), filepath.Join(b.home, ".gitconfig"))
	}
	return append(cfgs, local...)
}

// hooksPath protects the folder core.hooksPath names: its hooks run outside.
func (b *builder) hooksPath(wt string, cfgs []string) error {
	hp := gitConfigLast(cfgs, "core", "hookspath")
	if hp == "" {
		return nil
	}
	if strings.HasPrefix(hp, "~/") && b.home != "" {
		hp = filepath.Join(b.home, hp[2:])
	}
	if !filepath.IsAbs(hp) {
		hp = filepath.Join(wt, hp)
	}
	hp = filepath.Clean(hp)
	if !within(wt, hp) {
		// Outside the worktree it may lie in an allow_write folder, not
		// mounted yet: protected once every writable folder is
		// (protectLaterHooks).
		b.laterHooks = append(b.laterHooks, [2]string{wt, hp})
		return nil
	}
	return b.protectPath(wt, hp, true, "the folder core.hooksPath names: its hooks run outside")
}

// protectLaterHooks protects the core.hooksPath folders outside the
// worktrees, once allow_write's folders are mounted: before, one in an
// allow_write folder was not yet writable, so it was left writable.
func (b *builder) protectLaterHooks() error {
	for _, h := range b.laterHooks {
		if err := b.protectPath(h[0], h[1], true, "the folder core.hooksPath names: its hooks run outside"); err != nil {
			return err
		}
	}
	b.laterHooks = nil
	return nil
}

// checkout protects a writable project folder like a worktree: its git
// folder is read-only as a whole (hooks, config, commondir, info/ and the
// rest start programs or redirect git for the user's next git command
// outside), and agent settings and the hooks folder are protected.
func (b *builder) checkout(dir string) error {
	wt := resolve(dir)
	if !isDir(wt) {
		return refuse("run it from an existing folder", "%s is not a folder", dir)
	}
	dotgit := filepath.Join(wt, ".git")
	fi, err := os.Lstat(dotgit)
	switch {
	case err != nil:
		// Not a checkout's top (or no git): a .git created later would
		// make a repository whose config git runs. An empty read-only
		// stand-in keeps it from being created.
		b.addTmpfsStandIn(dotgit, "git folder of the checkout (missing: an empty read-only stand-in, so no repository with its own hooks or config can be made here)")
	case fi.Mode()&os.ModeSymlink != 0:
		return symlinkRefusal(dotgit, wt)
	default:
		why := "the checkout's git folder, read-only as a whole: hooks/, config, commondir and info/ start programs or redirect your next git command outside; commit outside the sandbox"
		if !fi.IsDir() {
			why = "the checkout's .git file (its pointer to the git folder)"
		}
		b.addBind(&b.protect, "ro-bind", dotgit, dotgit, why)
	}
	if err := b.agentSettings(wt); err != nil {
		return err
	}
	return b.hooksPath(wt, b.gitConfigs(filepath.Join(dotgit, "config")))
}

// Agent and editor settings that start programs later, outside.
var settingGroups = []struct {
	dir   string   // the folder
	files []string // protected files in it
	dirs  []string // protected sub-folders
	whole bool     // the whole folder is protected
}{
	{dir: ".claude", files: []string{"settings.json", "settings.local.json"}, dirs: []string{"hooks", "commands", "agents", "skills"}},
	{dir: ".vscode", files: []string{"tasks.json", "settings.json"}},
	{dir: ".codex", files: []string{"config.toml", "hooks.json"}},
	{dir: ".gemini", files: []string{"settings.json"}},
	{dir: ".cursor", whole: true},
	{dir: ".devcontainer", whole: true},
	{dir: ".husky", whole: true},
}

func (b *builder) agentSettings(wt string) error {
	const why = "agent and editor settings that start programs later"
	if err := b.protectPath(wt, filepath.Join(wt, ".mcp.json"), false, why+" (.mcp.json)"); err != nil {
		return err
	}
	for _, g := range settingGroups {
		d := filepath.Join(wt, g.dir)
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			// Missing: an empty read-only folder, so nothing can be created in it.
			b.addTmpfsStandIn(d, why+" ("+g.dir+"/ is missing: an empty read-only stand-in)")
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			return symlinkRefusal(d, wt)
		case !fi.IsDir():
			b.addBind(&b.protect, "ro-bind", d, d, why+" ("+g.dir+" is not a folder: read-only as it is)")
			continue
		}
		if g.whole {
			b.addBind(&b.protect, "ro-bind", d, d, why+" ("+g.dir+"/ whole)")
			continue
		}
		// Any missing protected entry makes the whole folder read-only: no
		// stand-in is created inside the user's folder.
		var present []string
		missing := ""
		for _, f := range g.files {
			p := filepath.Join(d, f)
			if _, err := os.Lstat(p); err != nil {
				missing = f
			} else {
				present = append(present, p)
			}
		}
		for _, s := range g.dirs {
			p := filepath.Join(d, s)
			if _, err := os.Lstat(p); err != nil {
				missing = s + "/"
			} else {
				present = append(present, p)
			}
		}
		if g.dir == ".claude" {
			// settings*.json beyond the two known names.
			m, _ := filepath.Glob(filepath.Join(d, "settings*.json"))
			present = append(present, m...)
		}
		for _, p := range present {
			if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				return symlinkRefusal(p, wt)
			}
		}
		if missing != "" {
			b.addBind(&b.protect, "ro-bind", d, d, fmt.Sprintf("%s (%s/%s is missing, so the whole folder is read-only)", why, g.dir, missing))
			continue
		}
		// The folder stays writable but cannot be moved or replaced.
		b.addBind(&b.protect, "bind", d, d, "a folder leading to protected settings: bound on itself so it cannot be moved or replaced")
		sort.Strings(present)
		for _, p := range present {
			if !b.mounted[p] {
				b.addBind(&b.protect, "ro-bind", p, p, why+" ("+rel(wt, p)+")")
			}
		}
	}
	return b.protectSettingScripts(wt)
}

// protectPath makes p read-only inside worktree root wt when it lies in a
// writable place, with a stand-in if it is missing and self-binds of the
// folders leading to it.
func (b *builder) protectPath(wt, p string, wantDir bool, why string) error {
	// Outside every writable place: read-only already.
	if !b.writableAt(p) {
		return nil
	}
	// Outside the worktree (a hooks folder in an allow_write folder), the
	// folders from the writable folder down to p are fixed the same way:
	// one the step could rename would let it put its own p in place.
	if !within(wt, p) {
		wt = b.writableTop(p)
	}
	// Resolve links on the way: a link anywhere on the path cannot be protected.
	for cur := p; within(wt, cur) && cur != wt; cur = filepath.Dir(cur) {
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return symlinkRefusal(cur, wt)
		}
	}
	// Folders between the worktree and p: bound on themselves (immovable).
	var lead []string
	for cur := filepath.Dir(p); within(wt, cur) && cur != wt; cur = filepath.Dir(cur) {
		lead = append([]string{cur}, lead...)
	}
	for _, d := range lead {
		if !isDir(d) {
			// A missing folder on the way: protect the first missing one.
			b.addTmpfsStandIn(d, why+" (missing: an empty read-only stand-in)")
			return nil
		}
		if !b.mounted[d] {
			b.addBind(&b.protect, "bind", d, d, "a folder leading to a protected path: bound on itself so it cannot be moved or replaced")
		}
	}
	fi, err := os.Lstat(p)
	switch {
	case err != nil && wantDir:
		b.addTmpfsStandIn(p, why+" (missing: an empty read-only stand-in)")
	case err != nil:
		b.addEmptyFile(p, why+" (missing: a read-only empty stand-in)")
	case fi.Mode()&os.ModeSymlink != 0:
		return symlinkRefusal(p, wt)
	default:
		b.addBind(&b.protect, "ro-bind", p, p, why)
	}
	return nil
}

func symlinkRefusal(p, wt string) error {
	t, err := filepath.EvalSymlinks(p)
	if err != nil {
		t, _ = os.Readlink(p)
	}
	if !within(wt, t) {
		return refuse("replace the link with a real file or folder", "%s is a symlink pointing outside the worktree (to %s); a protected path cannot be a link", p, t)
	}
	return refuse("replace the link with a real file or folder", "%s is a symlink (to %s); a protected path cannot be a link, since the link itself could be replaced", p, t)
}

// refStore mounts the attempt's private ref store over the repository's
// refs/ and logs/: the step writes whatever refs it likes there, and the
// repository's own stay read-only (a bind mount, which the step can
// neither remove nor rename over).
func (b *builder) refStore(w Worktree, cd string) error {
	if b.plan.Backend != "bubblewrap" {
		return refuse("leave RefStore empty on this backend (kusaw checks the ref folder afterwards instead)", "repo %s: a private ref store needs bind mounts, which the %s backend lacks", w.Repo, b.plan.Backend)
	}
	if !filepath.IsAbs(w.RefStore) {
		return refuse("give an absolute path", "ref store %q of repo %s is not absolute", w.RefStore, w.Repo)
	}
	for _, d := range []string{"refs", "logs"} {
		src, dst := filepath.Join(w.RefStore, d), filepath.Join(cd, d)
		if !isDir(src) || !isDir(dst) {
			return refuse("let kusaw create the ref store (worktree.NewRefStore)", "repo %s: %s or %s is not a folder", w.Repo, src, dst)
		}
		b.addBind(&b.writes, "bind", src, dst, fmt.Sprintf("repo %s's %s/: the attempt's private copy (branches, tags and reflogs the step writes stay there; kusaw takes only the attempt's branch, checked)", w.Repo, d))
	}
	return nil
}

// headRef returns the branch a worktree's HEAD names ("refs/heads/x"), or "".
func headRef(gitDir string) string {
	b, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if r, ok := strings.CutPrefix(s, "ref: "); ok && strings.HasPrefix(r, "refs/") && !strings.Contains(r, "..") {
		return r
	}
	return ""
}

// gitConfigLast returns the last value of section.key across files, in
// git's order of precedence (later files win). Includes are not followed.
func gitConfigLast(files []string, section, key string) string {
	val := ""
	for _, f := range files {
		if v, ok := gitConfigGet(f, section, key); ok {
			val = v
		}
	}
	return val
}

func gitConfigBool(file, section, key string) bool {
	v, ok := gitConfigGet(file, section, key)
	if !ok {
		return false
	}
	switch strings.ToLower(v) {
	case "", "true", "yes", "on", "1":
		return true
	}
	return false
}

// gitConfigGet is a small reader of git's INI format: enough for
// core.hooksPath and extensions.worktreeConfig.
func gitConfigGet(file, section, key string) (string, bool) {
	f, err := os.Open(file)
	if err != nil {
		return "", false
	}
	defer f.Close()
	cur, val, found := "", "", false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			cur = strings.ToLower(strings.Fields(line[1:end] + " ")[0])
			line = strings.TrimSpace(line[end+1:])
			if line == "" {
				continue
			}
		}
		if cur != section {
			continue
		}
		k, v, hasEq := strings.Cut(line, "=")
		if strings.ToLower(strings.TrimSpace(k)) != key {
			continue
		}
		found = true
		if !hasEq {
			val = ""
			continue
		}
		v = strings.TrimSpace(v)
		if i := strings.IndexAny(v, "#;"); i >= 0 && !strings.HasPrefix(v, "\"") {
			v = strings.TrimSpace(v[:i])
		}
		val = strings.Trim(v, "\"")
	}
	return val, found
}
