package providers

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// configurer is a provider that gives each sandboxed attempt its own CLI
// settings file, so kusaw can set what the sandbox needs without
// touching the user's own file.
type configurer interface {
	// attemptConfig writes the attempt's settings under dir and returns
	// the env that points the CLI at them.
	attemptConfig(dir string, in PrepareInput, home string, getenv func(string) string) (env []string, err error)
}

// CursorConfigFile is the name of Cursor CLI's settings file in its
// config folder.
const CursorConfigFile = "cli-config.json"

// attemptConfig gives a sandboxed Cursor a config folder of its own: a
// copy of the user's cli-config.json with HTTP/1.1 for agent traffic when
// the network is an allowlist (the CLI's HTTP/2 agent stream does not use
// HTTPS_PROXY), and links to everything else of the user's config folders
// (login, MCP settings) so the agent still finds them. The CLI rewrites
// some fields of its file as it runs: those writes land in the copy. The
// project state stays where it was (CURSOR_DATA_DIR).
func (cursor) attemptConfig(dir string, in PrepareInput, home string, getenv func(string) string) ([]string, error) {
	if !in.Sandboxed {
		return nil, nil // the user's own settings work outside kusaw's sandbox
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var sources []string
	if !in.FreshHome {
		if d := getenv("CURSOR_CONFIG_DIR"); d != "" {
			sources = append(sources, filepath.Clean(d))
		} else {
			if x := getenv("XDG_CONFIG_HOME"); x != "" {
				sources = append(sources, filepath.Join(x, "cursor"))
			} else if home != "" {
				sources = append(sources, filepath.Join(home, ".config", "cursor"))
			}
			if home != "" {
				sources = append(sources, filepath.Join(home, ".cursor"))
			}
		}
	}
	cfg := map[string]any{}
	for _, src := range sources {
		b, err := os.ReadFile(filepath.Join(src, CursorConfigFile))
		if err == nil && len(cfg) == 0 {
			// A file the CLI cannot read either is not carried over; the
			// CLI repairs a missing field itself.
			_ = json.Unmarshal(b, &cfg)
			if cfg == nil {
				cfg = map[string]any{}
			}
		}
		entries, _ := os.ReadDir(src)
		for _, e := range entries {
			n := e.Name()
			if n == CursorConfigFile || n == CursorConfigFile+".bad" {
				continue
			}
			link := filepath.Join(dir, n)
			if _, err := os.Lstat(link); err == nil {
				continue // the first folder that has it wins
			}
			if err := os.Symlink(filepath.Join(src, n), link); err != nil {
				return nil, err
			}
		}
	}
	if _, ok := cfg["version"]; !ok {
		cfg["version"] = 1
	}
	if in.Network == "allowlist" {
		netw, _ := cfg["network"].(map[string]any)
		if netw == nil {
			netw = map[string]any{}
		}
		netw["useHttp1ForAgent"] = true
		cfg["network"] = netw
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, CursorConfigFile), append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("cannot write the attempt's %s: %v", CursorConfigFile, err)
	}
	env := []string{"CURSOR_CONFIG_DIR=" + dir}
	if !in.FreshHome {
		if d := cursorDataDir(home, getenv); d != "" {
			env = append(env, "CURSOR_DATA_DIR="+d)
		}
	}
	return env, nil
}

// AttemptConfig writes, under dir, the per-attempt CLI settings a provider
// gives a sandboxed attempt (what Prepare does before a run) and returns
// the env pointing the CLI at them; ok is false for a provider that has
// none. kusaw sandbox doctor uses it to check what a step would get.
func AttemptConfig(provider, dir string, in PrepareInput) (env []string, ok bool, err error) {
	p, found := Get(provider)
	if !found {
		return nil, false, nil
	}
	c, is := p.(configurer)
	if !is {
		return nil, false, nil
	}
	home, _ := os.UserHomeDir()
	env, err = c.attemptConfig(dir, in, home, os.Getenv)
	return env, true, err
}

// CursorDefaultAPI is the API Cursor's CLI talks to unless -e or
// CURSOR_API_ENDPOINT moves it.
const CursorDefaultAPI = "https://api2.cursor.sh"
