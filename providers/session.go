package providers

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// sessionCarrier is a provider whose sessions live in the attempt's own
// provider folder (Codex inside kusaw's sandbox): continue_session copies
// the previous attempt's session files into the new attempt's folder.
type sessionCarrier interface {
	// sessionDirs are the folders, relative to the provider folder,
	// that hold the CLI's session files.
	sessionDirs() []string
}

// Codex keeps each thread's rollout under sessions/; its databases index
// them by absolute path (the previous attempt's), so they stay behind and
// the new attempt's Codex finds the rollout by its id.
func (codex) sessionDirs() []string { return []string{filepath.Join(CodexHomeDir, "sessions")} }

// Gemini CLI keeps each session under tmp/PROJECT/chats of its home
// (GEMINI_CLI_HOME, the attempt's own).
func (gemini) sessionDirs() []string { return []string{filepath.Join(GeminiHomeDir, ".gemini", "tmp")} }

// GeminiResumeFile is where, in the attempt's Gemini home folder,
// CarrySession puts the session the CLI imports (--session-file).
const GeminiResumeFile = "resume-session.jsonl"

// sessionImporter is a provider whose CLI continues a session from a file
// kusaw hands it, found among the previous attempt's session files.
type sessionImporter interface {
	importSession(id, from, to string) error
}

// importSession copies the previous attempt's session file of id (one
// whose first line names it) to GeminiResumeFile. A session that was
// itself imported has two such files, a stub the CLI starts and the one
// it records the conversation in: the larger is taken.
func (gemini) importSession(id, from, to string) error {
	files, _ := filepath.Glob(filepath.Join(from, GeminiHomeDir, ".gemini", "tmp", "*", "chats", "session-*.json*"))
	best, size := "", int64(-1)
	for _, f := range files {
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() || !realBelow(from, f) {
			continue // the CLI's own files only, no link a step left
		}
		if fi.Size() > size && geminiSessionID(f) == id {
			best, size = f, fi.Size()
		}
	}
	if best == "" {
		return fmt.Errorf("the previous attempt's Gemini session %s has no session file in %s", id, filepath.Join(from, GeminiHomeDir))
	}
	dst := filepath.Join(to, GeminiHomeDir, GeminiResumeFile)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	return copyFile(best, dst)
}

// geminiSessionID is the sessionId a Gemini CLI session file names: the
// first line of its JSON-lines form, or the whole older JSON form.
func geminiSessionID(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var head struct {
		SessionID string `json:"sessionId"`
	}
	dec := json.NewDecoder(io.LimitReader(f, 1<<20))
	if dec.Decode(&head) != nil {
		return ""
	}
	return head.SessionID
}

// CarrySession copies the session files of a provider's previous attempt
// (its provider folder from) into this attempt's (to), or the one session
// file of id a CLI imports. A provider whose sessions are not per attempt
// (or live in its login folder, which the sandbox carries), or a previous
// attempt that had none, is nothing to copy. Symbolic links are not
// followed: only the CLI's own files travel.
func CarrySession(provider, id, from, to string) error {
	p, ok := Get(provider)
	if !ok {
		return nil
	}
	if si, ok := p.(sessionImporter); ok {
		return si.importSession(id, from, to)
	}
	sc, ok := p.(sessionCarrier)
	if !ok {
		return nil
	}
	for _, d := range sc.sessionDirs() {
		src, dst := filepath.Join(from, d), filepath.Join(to, d)
		if !realBelow(from, src) {
			continue
		}
		err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			out := filepath.Join(dst, rel)
			switch {
			case e.IsDir():
				if e.Name() == "tmp" && path != src {
					return fs.SkipDir // the CLI's scratch files
				}
				return os.MkdirAll(out, 0o700)
			case e.Type().IsRegular():
				return copyFile(path, out)
			}
			return nil // links and others stay behind
		})
		if err != nil {
			return fmt.Errorf("copying %s: %v", d, err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// KeepSession moves a provider's session folders from the attempt's
// provider folder (from, about to be removed with tmp/) to keep, where
// CarrySession finds them for the run's next attempt.
func KeepSession(provider, from, keep string) error {
	p, ok := Get(provider)
	if !ok {
		return nil
	}
	sc, ok := p.(sessionCarrier)
	if !ok {
		return nil
	}
	for _, d := range sc.sessionDirs() {
		src := filepath.Join(from, d)
		if !realBelow(from, src) {
			continue
		}
		dst := filepath.Join(keep, d)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
	}
	return nil
}

// realBelow: path (below root) exists and neither root nor any folder
// between them is a symbolic link. The provider folder was the step's to
// write: a link it left there (to the user's own ~/.gemini, say) would
// have kusaw, outside the sandbox, move or copy what it points to. The
// last component is the caller's to check (a rename moves a link itself,
// WalkDir does not follow its root, importSession wants a regular file).
func realBelow(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return false
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return false
	}
	p := root
	parts := strings.Split(rel, string(filepath.Separator))
	for i, c := range parts {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if err != nil {
			return false
		}
		if i < len(parts)-1 && !fi.IsDir() {
			return false // a link or a file where a folder should be
		}
	}
	return true
}
