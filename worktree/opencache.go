package worktree

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// OpenRepo's answers for a repository change only with its config files:
// where its git folder is, the filter guard, whether worktrees may be
// made plainly, whether go-git can read it. A worker opens its cache
// repository for every attempt, two git processes each time; openCache
// keeps the answers while none of the config files git read (nor the
// user's and the system's usual ones, which may appear later) changed.
// It never keeps a repository that configures filter drivers: their guard
// also depends on the .gitattributes of HEAD.
var openCache sync.Map // abs path + git's environment → *openFacts

type openFacts struct {
	bare              bool
	common, path      string
	guard             []string
	plainAdd          bool
	goGit             reader // the in-process reader, nil when git answers
	readerNote        string
	stamps            []fileStamp
	commonIno, absIno uint64
}

// fileStamp is what changes when a config file is written, replaced,
// created or removed.
type fileStamp struct {
	path  string
	ok    bool
	size  int64
	mtime int64
	ino   uint64
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{path: path}
	}
	return fileStamp{path: path, ok: true, size: st.Size(), mtime: st.ModTime().UnixNano(), ino: inoOf(st)}
}

func inoOf(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Ino)
	}
	return 0
}

// racyWindow: a file changed this shortly before it was read may change
// again within the same timestamp, unseen (git's racy-clean rule).
const racyWindow = 2 * time.Second

// configCandidates are the config files git reads when they exist: a
// cached answer is dropped when one of them appears.
func configCandidates(g *gitRunner, common string) []string {
	env := map[string]string{}
	for _, kv := range g.env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	out := []string{filepath.Join(common, "config"), filepath.Join(common, "config.worktree"), "/etc/gitconfig"}
	if h := env["HOME"]; h != "" {
		out = append(out, filepath.Join(h, ".gitconfig"), filepath.Join(h, ".config", "git", "config"))
	}
	if x := env["XDG_CONFIG_HOME"]; x != "" {
		out = append(out, filepath.Join(x, "git", "config"))
	}
	return out
}

func openKey(abs string, g *gitRunner) string {
	return abs + "\x00" + strings.Join(g.env, "\x00")
}

// cachedOpen returns the repository at abs from the cache when its
// answers still hold.
func cachedOpen(abs string, g *gitRunner, absIno uint64) *Repo {
	v, ok := openCache.Load(openKey(abs, g))
	if !ok {
		return nil
	}
	f := v.(*openFacts)
	if absIno != f.absIno {
		return nil
	}
	if st, err := os.Stat(f.common); err != nil || inoOf(st) != f.commonIno {
		return nil
	}
	for _, s := range f.stamps {
		if stampOf(s.path) != s {
			return nil
		}
	}
	g.guard = f.guard
	r := &Repo{Bare: f.bare, CommonDir: f.common, Path: f.path, git: g, plainAdd: f.plainAdd, readerNote: f.readerNote}
	if f.goGit != nil {
		r.rd = f.goGit
	} else {
		r.rd = binReader{g: g, dir: r.workDir(), common: r.CommonDir}
	}
	return r
}

// keepOpen stores r's answers, read from config files since start, unless
// filters are configured or a file changed too recently to be trusted.
func keepOpen(abs string, r *Repo, files []string, start time.Time, absIno uint64) {
	if len(r.git.guard) > 0 {
		return
	}
	st, err := os.Stat(r.CommonDir)
	if err != nil {
		return
	}
	f := &openFacts{bare: r.Bare, common: r.CommonDir, path: r.Path, plainAdd: r.plainAdd, readerNote: r.readerNote,
		commonIno: inoOf(st), absIno: absIno}
	if _, bin := r.rd.(binReader); !bin {
		f.goGit = r.rd
	}
	files = append(files, configCandidates(r.git, r.CommonDir)...)
	if !r.Bare {
		// A .git link names the git folder: the link changing moves it.
		if li, err := os.Lstat(filepath.Join(r.Path, ".git")); err == nil && li.Mode().IsRegular() {
			files = append(files, filepath.Join(r.Path, ".git"))
		}
	}
	seen := map[string]bool{}
	for _, p := range files {
		if seen[p] {
			continue
		}
		seen[p] = true
		s := stampOf(p)
		if s.ok && time.Unix(0, s.mtime).After(start.Add(-racyWindow)) {
			return
		}
		f.stamps = append(f.stamps, s)
	}
	openCache.Store(openKey(abs, r.git), f)
}
