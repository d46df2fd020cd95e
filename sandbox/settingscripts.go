package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Agent and editor settings are read-only inside the sandbox, but the
// programs they start are files of the worktree too: a hook's script, an
// MCP server's entry file, an editor task's script. A step that changes
// one (or creates one that is named but missing) has code the user's own
// agent or editor runs later, outside any sandbox. So every script those
// settings name, as the agent would resolve it (from the project folder,
// with $CLAUDE_PROJECT_DIR), is protected like the settings themselves.

// settingScript is one file a setting names, and where.
type settingScript struct {
	Path string // absolute, inside the worktree
	From string // "<settings file>: <the command>"
}

// settingScripts reads the protected settings in wt and returns the
// worktree files they name, sorted, each once.
func settingScripts(wt string) []settingScript {
	var out []settingScript
	add := func(file, cmd string, tokens []string) {
		for _, t := range tokens {
			if p, ok := scriptPath(wt, t); ok {
				out = append(out, settingScript{Path: p, From: rel(wt, file) + ": " + cmd})
			}
		}
	}
	claude, _ := filepath.Glob(filepath.Join(wt, ".claude", "settings*.json"))
	for _, f := range claude {
		var s struct {
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
		if !readJSON(f, &s) {
			continue
		}
		for _, groups := range s.Hooks {
			for _, g := range groups {
				for _, h := range g.Hooks {
					add(f, h.Command, shellWords(h.Command))
				}
			}
		}
		for _, c := range []string{s.StatusLine.Command, s.APIKeyHelper} {
			add(f, c, shellWords(c))
		}
	}
	for _, f := range []string{filepath.Join(wt, ".mcp.json"), filepath.Join(wt, ".gemini", "settings.json"), filepath.Join(wt, ".cursor", "mcp.json")} {
		var s struct {
			Servers map[string]struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"mcpServers"`
		}
		if !readJSON(f, &s) {
			continue
		}
		for _, srv := range s.Servers {
			add(f, strings.TrimSpace(srv.Command+" "+strings.Join(srv.Args, " ")), append(shellWords(srv.Command), srv.Args...))
		}
	}
	{
		f := filepath.Join(wt, ".vscode", "tasks.json")
		var s struct {
			Tasks []struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"tasks"`
		}
		if readJSON(f, &s) {
			for _, t := range s.Tasks {
				add(f, strings.TrimSpace(t.Command+" "+strings.Join(t.Args, " ")), append(shellWords(t.Command), t.Args...))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	seen := map[string]bool{}
	uniq := out[:0]
	for _, s := range out {
		if !seen[s.Path] {
			seen[s.Path] = true
			uniq = append(uniq, s)
		}
	}
	return uniq
}

// readJSON reads a small settings file, comments and trailing commas
// allowed (VS Code writes JSON with comments). A file that is missing, a
// link or too big is skipped: the settings themselves are protected, and
// a link among them refuses the attempt elsewhere.
func readJSON(path string, v any) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	return json.Unmarshal(stripJSONC(b), v) == nil
}

// stripJSONC removes // and /* */ comments outside strings, and trailing
// commas.
func stripJSONC(b []byte) []byte {
	var out []byte
	inStr, esc := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr:
			out = append(out, c)
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
			out = append(out, c)
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			out = append(out, '\n')
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			i += 2
			for i+1 < len(b) && !(b[i] == '*' && b[i+1] == '/') {
				i++
			}
			i++
		default:
			out = append(out, c)
		}
	}
	return dropTrailingCommas(out)
}

// dropTrailingCommas removes each comma that only white space separates
// from a closing } or ].
func dropTrailingCommas(b []byte) []byte {
	out := b[:0:0]
	for i, c := range b {
		if c == ',' {
			j := i + 1
			for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r' || b[j] == '\f') {
				j++
			}
			if j < len(b) && (b[j] == '}' || b[j] == ']') {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// shellWords splits a command line as a shell would, closely enough to
// find the file names in it: quotes group, operators separate.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quote := byte(0)
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote = c
		case strings.IndexByte(" \t\n;&|()<>`", c) >= 0:
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}

// scriptExts are the extensions that make a word without a slash a script.
var scriptExts = []string{"sh", "bash", "zsh", "js", "mjs", "cjs", "ts", "mts", "py", "rb", "pl", "php", "ps1", "lua", "jar"}

func hasScriptExt(w string) bool {
	return slices.ContainsFunc(scriptExts, func(e string) bool { return strings.HasSuffix(w, "."+e) })
}

// scriptPath turns a word of a command into a file of the worktree when it
// names one: a path (with a slash, or a script's extension), relative to
// the project folder or under $CLAUDE_PROJECT_DIR. Options, assignments,
// URLs and files outside the worktree are not scripts of it; neither is
// anything in git's own folder, which is protected as a whole already.
func scriptPath(wt, w string) (string, bool) {
	for _, v := range []string{"${CLAUDE_PROJECT_DIR}", "$CLAUDE_PROJECT_DIR", "${workspaceFolder}", "${workspaceRoot}"} {
		w = strings.ReplaceAll(w, v, wt)
	}
	// @scope/name is an npm package (npx, bunx), not a file.
	if w == "" || strings.HasPrefix(w, "-") || strings.HasPrefix(w, "@") || strings.Contains(w, "=") || strings.Contains(w, "://") || strings.ContainsAny(w, "$*?") {
		return "", false
	}
	if !strings.Contains(w, "/") && !hasScriptExt(w) {
		return "", false
	}
	p := w
	if !filepath.IsAbs(p) {
		p = filepath.Join(wt, p)
	}
	p = filepath.Clean(p)
	if p == wt || !within(wt, p) {
		return "", false
	}
	if r := rel(wt, p); r == ".git" || strings.HasPrefix(r, ".git/") {
		return "", false
	}
	return p, true
}

// protectSettingScripts makes each script the settings in wt name
// read-only (an empty read-only stand-in when missing), except those the
// factory lists in sandbox.settings_scripts_writable.
func (b *builder) protectSettingScripts(wt string) error {
	for _, s := range settingScripts(wt) {
		r := rel(wt, s.Path)
		if b.scriptWritable(r) {
			b.plan.Notes = append(b.plan.Notes, "agent settings name "+r+" ("+s.From+"); writable: sandbox.settings_scripts_writable lists it")
			continue
		}
		if b.mounted[s.Path] {
			continue
		}
		b.plan.Notes = append(b.plan.Notes, "agent settings name "+r+" ("+s.From+"); read-only")
		if err := b.protectPath(wt, s.Path, false, "a script agent or editor settings run outside later ("+s.From+")"); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) scriptWritable(r string) bool {
	for _, w := range b.in.SettingsScriptsWritable {
		w = filepath.Clean(w)
		if r == w || strings.HasPrefix(r, w+"/") {
			return true
		}
	}
	return false
}
