package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/kusaw/kusaw/internal/rmtree"
)

// The agent's login state is the attempt's own. Each login folder appears
// inside as a copy made for the attempt (under the attempt folder): the
// CLI writes its session state there, and only the credentials file is
// carried back, after checks. Everything in the folder that starts a
// program later is bound read-only from the original on top of the copy
// (mounts at a path always come after those of the folders holding it,
// see ordered): the CLI's own install, settings, the scripts they name,
// plugins, hooks, commands, agents, skills, memory files. Sub-folders the
// CLI writes its session state into start empty: the user's other
// sessions stay outside. Any other sub-folder is shown read-only.

// LoginCopy is one login folder or file and the attempt's copy of it.
type LoginCopy struct {
	Src  string `json:"src"`  // the agent's own folder or file (links resolved)
	Dst  string `json:"dst"`  // where it appears inside (the name the agent uses)
	Copy string `json:"copy"` // the attempt's copy on the host
	Dir  bool   `json:"dir,omitempty"`
	// Files are the names copied from Src (regular files at its top).
	Files []string `json:"files,omitempty"`
	// Empty are the names made in the copy as empty folders (session
	// state), and Made the protected names missing from Src, made in the
	// copy as empty settings and bound read-only.
	Empty []string     `json:"empty,omitempty"`
	Made  []Precreated `json:"made,omitempty"`
	// Credentials are the names carried back to Src after the step, each
	// only as its CLI's refresh changes it (Refresh, credentials.go).
	Credentials []string         `json:"credentials,omitempty"`
	Refresh     []CredentialRule `json:"refresh,omitempty"`
	// Session are the session-state folders carried between the attempts
	// of one run (continue_session): filled from SessionFrom (the
	// previous attempt's) before the step, moved to SessionKeep (this
	// attempt's) after it. Never from or to Src.
	Session     []string `json:"session,omitempty"`
	SessionFrom string   `json:"session_from,omitempty"`
	SessionKeep string   `json:"session_keep,omitempty"`
}

// LoginSession names what of the agent's login state continues a session
// in the run's next attempt, and where it is kept in between.
type LoginSession struct {
	// Dirs are the login folder's sub-folders holding the CLI's sessions
	// (Claude Code: projects); each must be session state (loginState),
	// which the copy starts empty.
	Dirs []string
	// Keep is a folder of this attempt where Cleanup keeps them (one
	// sub-folder per login folder).
	Keep string
	// From is the previous attempt's Keep ("": a new session).
	From string
}

// Precreated is a file or folder Prepare makes in a login copy.
type Precreated struct {
	Path    string `json:"path"`
	Dir     bool   `json:"dir,omitempty"`
	Content string `json:"content,omitempty"`
}

// loginProtected names, per login folder (by its base name; "" for Claude
// Code's ~/.claude or CLAUDE_CONFIG_DIR), what starts a program later:
// read-only inside, made empty when missing.
var loginProtected = map[string]struct{ files, dirs []string }{
	"": {files: []string{"settings.json", "settings.local.json", "CLAUDE.md", "AGENTS.md", ".mcp.json"},
		dirs: []string{"local", "hooks", "commands", "agents", "skills", "plugins", "output-styles"}},
	".cursor": {files: []string{"mcp.json", "hooks.json", "cli-config.json", "AGENTS.md"},
		dirs: []string{"hooks", "commands", "rules", "agents", "skills", "plugins", "extensions"}},
	"cursor": {files: []string{"cli-config.json", "mcp.json", "hooks.json"}},
}

// loginState are sub-folders CLIs write their session state into: empty
// in the copy (the user's other sessions are not the step's to read).
var loginState = []string{"projects", "todos", "shell-snapshots", "statsig", "session-env", "file-history",
	"debug", "ide", "logs", "plans", "telemetry", "chats", "snapshots", "paste-cache", "cache", "worktrees",
	"log", "storage", "snapshot"} // the last: opencode's (~/.local/share/opencode)

// loginCredentials are the files carried back: the CLI may refresh its
// login during the step.
var loginCredentials = []string{".credentials.json", "auth.json"}

const (
	maxLoginFile  = 8 << 20  // a file copied into a login copy
	maxLoginTotal = 64 << 20 // all files of one login copy
	maxCredential = 64 << 10 // a credentials file carried back
)

// login adds the agent's login folders as the attempt's copies.
func (b *builder) login() error {
	in := b.in
	if in.FreshHome {
		if len(in.LoginPaths) > 0 {
			b.plan.Notes = append(b.plan.Notes, "login folders are not mounted: HOME is fresh and the agent signs in with a token (a step secret)")
		}
		return nil
	}
	if len(in.LoginPaths) > 0 && b.private {
		return refuse("run the agent step from a factory (its attempt folder holds the login copy)", "login folders need the attempt folder on disk; the private temp folder has none")
	}
	for i, p := range in.LoginPaths {
		r, err := abs("login path", p)
		if err != nil {
			return err
		}
		if !exists(r) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("login path %s does not exist; not mounted", r))
			continue
		}
		if b.home != "" && within(r, b.home) {
			return refuse("name the agent's own folder", "login path %q would expose the whole home", p)
		}
		// The name the agent uses, with the folders above it resolved.
		c := filepath.Clean(p)
		dst := filepath.Join(resolve(filepath.Dir(c)), filepath.Base(c))
		lc := LoginCopy{Src: r, Dst: dst, Copy: filepath.Join(b.attempt, "login", strconv.Itoa(i))}
		if err := b.loginCopy(&lc); err != nil {
			return err
		}
		b.plan.LoginCopies = append(b.plan.LoginCopies, lc)
	}
	return nil
}

// loginCopy plans one copy: what is copied, made empty, bound read-only.
func (b *builder) loginCopy(lc *LoginCopy) error {
	fi, err := os.Stat(lc.Src)
	if err != nil {
		return refuse("check the agent's login folder", "login path %s: %v", lc.Src, err)
	}
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() || fi.Size() > maxLoginFile {
			b.addBind(&b.writes, "ro-bind", lc.Src, lc.Dst, "the agent's login file, read-only (not a regular file of at most 8 MiB, so not copied)")
			return nil
		}
		b.addBind(&b.writes, "bind", lc.Copy, lc.Dst, "the agent's login file: the attempt's own copy (changes stay in the attempt)")
		return nil
	}
	lc.Dir = true
	b.addBind(&b.writes, "bind", lc.Copy, lc.Dst, "the agent's login folder: the attempt's own copy (session state stays in the attempt; only the credentials file is carried back, checked)")
	set := loginProtected[filepath.Base(lc.Src)]
	if filepath.Base(lc.Src) != ".cursor" && filepath.Base(lc.Src) != "cursor" {
		set = loginProtected[""]
	}
	ents, err := os.ReadDir(lc.Src)
	if err != nil {
		return refuse("check the agent's login folder", "login folder %s: %v", lc.Src, err)
	}
	protected := func(name string, dir bool) bool {
		if dir {
			return slices.Contains(set.dirs, name)
		}
		return slices.Contains(set.files, name) || strings.HasPrefix(name, "settings") && strings.HasSuffix(name, ".json")
	}
	var total int64
	for _, e := range ents {
		name, src, dst := e.Name(), filepath.Join(lc.Src, e.Name()), filepath.Join(lc.Dst, e.Name())
		info, err := e.Info()
		if err != nil {
			continue
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			b.loginLink(src, dst, name, protected)
		case info.IsDir() && slices.Contains(loginState, name) && !protected(name, true):
			lc.Empty = append(lc.Empty, name)
		case info.IsDir():
			why := "read-only: a folder of the agent's login folder that is not session state"
			if protected(name, true) {
				why = "read-only: it starts programs in your next session outside (" + name + "/)"
			}
			b.addBind(&b.protect, "ro-bind", src, dst, why)
		case protected(name, false):
			b.addBind(&b.protect, "ro-bind", src, dst, "read-only: agent settings or memory that start programs in your next session outside ("+name+")")
		case info.Mode().IsRegular() && info.Size() <= maxLoginFile && total+info.Size() <= maxLoginTotal:
			total += info.Size()
			lc.Files = append(lc.Files, name)
			if slices.Contains(loginCredentials, name) {
				lc.Credentials = append(lc.Credentials, name)
				for _, r := range b.in.CredentialRules {
					if r.Name == name {
						lc.Refresh = append(lc.Refresh, r)
					}
				}
			}
		case info.Mode().IsRegular():
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("login file %s is too large to copy (over 8 MiB, or 64 MiB in all); not in the sandbox", src))
		}
	}
	b.loginMissing(lc, set.files, set.dirs)
	if err := b.loginSession(lc); err != nil {
		return err
	}
	return b.loginScripts(lc)
}

// loginSession plans which session folders of a login copy travel to the
// run's next attempt: only those LoginSession names, each session state,
// so no setting, script or credentials file can travel with them.
func (b *builder) loginSession(lc *LoginCopy) error {
	ls := b.in.LoginSession
	if ls == nil || len(ls.Dirs) == 0 {
		return nil
	}
	key := sessionKey(lc.Src)
	if ls.Keep != "" {
		k, err := abs("login session folder", ls.Keep)
		if err != nil {
			return err
		}
		if !within(b.attempt, k) || k == b.attempt || within(filepath.Join(b.attempt, "login"), k) {
			return refuse("keep the session in the attempt's own folder", "login session folder %s is not a folder of the attempt folder %s beside its login copies", ls.Keep, b.attempt)
		}
		lc.SessionKeep = filepath.Join(k, key)
	}
	if ls.From != "" {
		f, err := abs("previous session folder", ls.From)
		if err != nil {
			return err
		}
		if within(lc.Src, f) || within(f, lc.Src) {
			return refuse("name the previous attempt's session folder", "previous session folder %s is in the agent's own login folder %s", ls.From, lc.Src)
		}
		lc.SessionFrom = filepath.Join(f, key)
	}
	for _, d := range ls.Dirs {
		if !slices.Contains(loginState, d) || d != filepath.Base(d) {
			return refuse("name session-state folders only ("+strings.Join(loginState, ", ")+")", "login session folder %q is not session state of the agent's login folder", d)
		}
		lc.Session = append(lc.Session, d)
	}
	return nil
}

// loginLink shows a link of the login folder read-only at its name when
// it is a protected entry (dotfiles managers link settings); other links
// are left out.
func (b *builder) loginLink(src, dst, name string, protected func(string, bool) bool) {
	t, err := filepath.EvalSymlinks(src)
	fi, serr := os.Stat(t)
	if err != nil || serr != nil || !protected(name, fi.IsDir()) {
		b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("login folder entry %s is a link; not in the sandbox", src))
		return
	}
	b.addBind(&b.protect, "ro-bind", t, dst, "read-only: agent settings that start programs in your next session outside ("+name+", a link to "+t+")")
}

// loginMissing makes the protected entries Src lacks in the copy (an
// empty setting or folder) and binds them read-only on themselves, so the
// step cannot create one the CLI would run in this attempt.
func (b *builder) loginMissing(lc *LoginCopy, files, dirs []string) {
	for _, group := range []struct {
		names []string
		dir   bool
	}{{files, false}, {dirs, true}} {
		for _, n := range group.names {
			if _, err := os.Lstat(filepath.Join(lc.Src, n)); err == nil {
				continue
			}
			content := ""
			if strings.HasSuffix(n, ".json") {
				content = "{}\n"
			}
			lc.Made = append(lc.Made, Precreated{Path: n, Dir: group.dir, Content: content})
			b.addBind(&b.protect, "ro-bind", filepath.Join(lc.Copy, n), filepath.Join(lc.Dst, n), "read-only: missing from the agent's login folder, an empty one so none can be made ("+n+")")
		}
	}
}

// loginScripts binds read-only the files of the login folder that its
// settings name (hooks, statusLine, apiKeyHelper): they run in the user's
// next session outside.
func (b *builder) loginScripts(lc *LoginCopy) error {
	files, _ := filepath.Glob(filepath.Join(lc.Src, "settings*.json"))
	var named []string
	for _, f := range files {
		var s claudeSettings
		if !readJSON(f, &s) {
			continue
		}
		for _, c := range s.commands() {
			for _, w := range shellWords(c) {
				w = strings.NewReplacer("${HOME}", b.home, "$HOME", b.home, "${CLAUDE_CONFIG_DIR}", lc.Dst, "$CLAUDE_CONFIG_DIR", lc.Dst).Replace(w)
				if strings.HasPrefix(w, "~/") && b.home != "" {
					w = filepath.Join(b.home, w[2:])
				}
				if !filepath.IsAbs(w) {
					continue
				}
				w = filepath.Clean(w)
				for _, base := range []string{lc.Dst, lc.Src} {
					if within(base, w) && w != base {
						named = append(named, filepath.Join(lc.Src, rel(base, w)))
					}
				}
			}
		}
	}
	sort.Strings(named)
	for _, p := range slices.Compact(named) {
		dst := filepath.Join(lc.Dst, rel(lc.Src, p))
		if b.mounted[dst] || b.coveredReadOnly(dst) {
			continue
		}
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			b.addEmptyFile(dst, "a script the login folder's settings name (missing: a read-only empty stand-in)")
		case fi.Mode()&os.ModeSymlink != 0:
			return refuse("replace the link with a real file", "%s is a symlink named by the agent's settings; a protected path cannot be a link", p)
		default:
			b.addBind(&b.protect, "ro-bind", p, dst, "read-only: a script the login folder's settings run in your next session outside")
		}
	}
	return nil
}

// coveredReadOnly reports whether p lies in a read-only bind of the
// protect tier (a protected folder of the login folder).
func (b *builder) coveredReadOnly(p string) bool {
	for _, m := range b.protect {
		if m.Op == "ro-bind" && within(m.Dst, p) {
			return true
		}
	}
	return false
}

// claudeSettings is what of Claude Code's settings starts programs.
type claudeSettings struct {
	Hooks map[string][]struct {
		Hooks []struct {
			Command string `json:"command"`
		} `json:"hooks"`
	} `json:"hooks"`
	StatusLine struct {
		Command string `json:"command"`
	} `json:"statusLine"`
	APIKeyHelper string `json:"apiKeyHelper"`
}

func (s claudeSettings) commands() []string {
	var out []string
	for _, groups := range s.Hooks {
		for _, g := range groups {
			for _, h := range g.Hooks {
				out = append(out, h.Command)
			}
		}
	}
	return append(out, s.StatusLine.Command, s.APIKeyHelper)
}

// prepareLogin makes the attempt's login copies.
func (p *Plan) prepareLogin() error {
	for _, lc := range p.LoginCopies {
		if err := lc.make(); err != nil {
			return fmt.Errorf("sandbox: login copy of %s: %w", lc.Src, err)
		}
	}
	return nil
}

func (lc LoginCopy) make() error {
	if err := rmtree.RemoveAll(lc.Copy); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(lc.Copy), 0o700); err != nil {
		return err
	}
	if !lc.Dir {
		return copyRegular(lc.Src, lc.Copy, maxLoginFile)
	}
	if err := os.Mkdir(lc.Copy, 0o700); err != nil {
		return err
	}
	for _, n := range lc.Files {
		if err := copyRegular(filepath.Join(lc.Src, n), filepath.Join(lc.Copy, n), maxLoginFile); err != nil {
			return err
		}
	}
	for _, n := range lc.Empty {
		if err := os.Mkdir(filepath.Join(lc.Copy, n), 0o700); err != nil {
			return err
		}
	}
	if err := lc.carrySession(); err != nil {
		return err
	}
	for _, m := range lc.Made {
		q := filepath.Join(lc.Copy, m.Path)
		if m.Dir {
			if err := os.Mkdir(q, 0o755); err != nil {
				return err
			}
		} else if err := os.WriteFile(q, []byte(m.Content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyRegular copies a regular file (never through a link) of at most max bytes.
func copyRegular(src, dst string, max int64) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return fmt.Errorf("%s is not a regular file of at most %d bytes", src, max)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm()&0o700|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.LimitReader(in, max))
	return errors.Join(err, out.Close())
}

// sessionKey names a login folder's kept session folder: its base name
// and a hash of its path (the path itself could be longer than a file
// name may be).
func sessionKey(src string) string {
	sum := sha256.Sum256([]byte(src))
	return filepath.Base(src) + "-" + hex.EncodeToString(sum[:8])
}

// maxSessionTotal bounds the session files carried into one login copy.
const maxSessionTotal = 256 << 20

// carrySession copies the previous attempt's session folders into the
// copy: folders and regular files only (a link or FIFO the previous step
// left stays behind), at most maxSessionTotal bytes.
func (lc LoginCopy) carrySession() error {
	if lc.SessionFrom == "" {
		return nil
	}
	var total int64
	for _, n := range lc.Session {
		src := filepath.Join(lc.SessionFrom, n)
		if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
			continue
		}
		err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			out := filepath.Join(lc.Copy, n, rel(src, path))
			switch {
			case e.IsDir():
				return os.MkdirAll(out, 0o700)
			case e.Type().IsRegular():
				fi, err := e.Info()
				if err != nil {
					return err
				}
				if total += fi.Size(); total > maxSessionTotal {
					return fmt.Errorf("the previous attempt's session is over %d MiB", maxSessionTotal>>20)
				}
				return copyRegular(path, out, maxSessionTotal)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("carrying the previous attempt's session (%s): %w", n, err)
		}
	}
	return nil
}

// keepSession moves the copy's session folders to SessionKeep, for the
// run's next attempt.
func (lc LoginCopy) keepSession() error {
	if lc.SessionKeep == "" {
		return nil
	}
	for _, n := range lc.Session {
		src := filepath.Join(lc.Copy, n)
		if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
			continue
		}
		if err := os.MkdirAll(lc.SessionKeep, 0o700); err != nil {
			return err
		}
		dst := filepath.Join(lc.SessionKeep, n)
		if err := rmtree.RemoveAll(dst); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("sandbox: keeping the agent's session: %w", err)
		}
	}
	return nil
}

// finishLogin carries the credentials back from each copy, keeps the
// session folders continue_session names, then removes the copies (they
// hold the login).
func (p *Plan) finishLogin() error {
	var errs []error
	for _, lc := range p.LoginCopies {
		for _, n := range lc.Credentials {
			out, err := carryBack(filepath.Join(lc.Copy, n), filepath.Join(lc.Src, n), lc.rule(n), p.Reached)
			if err != nil {
				errs = append(errs, err)
			}
			if out != nil {
				p.Carried = append(p.Carried, *out)
			}
		}
		if err := lc.keepSession(); err != nil {
			errs = append(errs, err)
		}
		if err := rmtree.RemoveAll(lc.Copy); err != nil {
			errs = append(errs, err)
		}
	}
	if len(p.LoginCopies) > 0 {
		_ = os.Remove(filepath.Dir(p.LoginCopies[0].Copy)) // login/, once empty
	}
	return errors.Join(errs...)
}
