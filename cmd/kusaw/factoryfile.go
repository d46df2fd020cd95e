package main

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/status"
)

// factoryPath picks the factory file: -f, else ./factory.yaml, else the
// file setting ($KUSAW_CONFIG, then the settings file).
func (a *app) factoryPath() (string, error) {
	p, _, err := a.factoryPathSource()
	return p, err
}

// factoryPathSource is factoryPath and where the choice came from, for
// kusaw env.
func (a *app) factoryPathSource() (string, string, error) {
	if a.file != "" {
		return a.file, "flag --file", nil
	}
	if _, err := os.Stat("factory.yaml"); err == nil {
		return "factory.yaml", "current folder", nil
	}
	cfg, err := a.settings(nil)
	if err != nil {
		return "", "", err
	}
	if p := cfg.get("file"); p != "" {
		return p, cfg.source["file"], nil
	}
	return "", "unset", exitf(status.ExitInvalidConfig, "no factory.yaml in this directory; pass -f FILE, set KUSAW_CONFIG, or run kusaw init")
}

// loadFactory loads the factory file and fails with exit 3 and the first
// error finding when it is invalid. Warnings are not printed here: validate
// and doctor show them.
func (a *app) loadFactory() (*config.Factory, error) {
	p, err := a.factoryPath()
	if err != nil {
		return nil, err
	}
	f, fs, err := config.Load(p)
	if err != nil {
		return nil, exitf(status.ExitInvalidConfig, "%v", err)
	}
	cfg, err := a.settings(nil)
	if err != nil {
		return nil, err
	}
	if d := cfg.get("state_dir"); d != "" {
		f.StateDir, _ = filepath.Abs(d)
	}
	if errs := fs.Errors(); len(errs) > 0 {
		e := errs[0]
		e.File = relPath(e.File)
		more := ""
		if len(errs) > 1 {
			more = " (and more: run kusaw validate)"
		}
		return nil, exitf(status.ExitInvalidConfig, "%s%s", e.String(), more)
	}
	return f, nil
}

func relPath(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && len(r) < len(p) && !errors.Is(err, os.ErrNotExist) {
		return r
	}
	return p
}
