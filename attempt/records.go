package attempt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/worktree"
)

// SecretRedacted stands for a secret's value in every record.
const SecretRedacted = "<secret>"

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(b, '\n'), record.FileMode())
}

// writeJSONVolatile writes path whole (a reader never sees half of it)
// but without fsync: for a volatile attempt's records (Job.Volatile).
func writeJSONVolatile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Chmod(record.FileMode())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s is damaged: %v", path, err)
	}
	return nil
}

func ptrTime(t time.Time) *time.Time { return &t }

// RemoveWorktree removes an attempt's worktree from its repository; the
// branch stays.
func RemoveWorktree(w *record.WorktreeRecord) error {
	if w.Removed || w.Path == "" {
		return nil
	}
	repo, err := worktree.OpenRepo(w.RepoPath)
	if err != nil {
		return err
	}
	if err := repo.RemoveWorktree(&worktree.Worktree{Repo: repo.String(), Path: w.Path, GitDir: w.GitDir, Branch: w.Branch, CommonDir: repo.CommonDir}); err != nil {
		return err
	}
	w.Removed = true
	return nil
}

func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}
