package steps

import (
	"encoding/json"
	"path/filepath"
	"strings"
)

// Ecosystem is what kusaw knows of a repository's kind from its files: the
// command that installs its dependencies and runs its tests, the cache
// presets that make a second run warm, and the package hosts the install
// fetches from (kusaw init writes all three; the checks built-in runs the
// command).
type Ecosystem struct {
	Name   string   // go, node, python, rust, make
	Test   []string // install (when needed) then test
	Why    string   // what it was found from
	Caches []string // config.CachePresets names
	Hosts  []string // package hosts the install and tests reach
	// Env is what the tests need to reach the user's own package mirror
	// (GOPROXY, npm_config_registry, ...); set by Mirror.
	Env map[string]string
}

// Detect finds a repository's ecosystem; ok is false when it finds no test
// command. A Makefile's test target wins (the project says how it tests),
// and still gets the caches and hosts of the language beside it.
func Detect(dir string) (eco Ecosystem, ok bool) {
	lang, found := detectLanguage(dir)
	if b, err := readSmall(filepath.Join(dir, "Makefile")); err == nil && makeTestTarget().Match(b) {
		lang.Name, lang.Test, lang.Why = "make", []string{"make", "test"}, "Makefile has a test target"
		return lang, true
	}
	return lang, found
}

func detectLanguage(dir string) (Ecosystem, bool) {
	has := func(name string) bool { return fileExists(filepath.Join(dir, name)) }
	switch {
	case has("go.mod"):
		return Ecosystem{Name: "go", Test: []string{"go", "test", "./..."}, Why: "go.mod",
			Caches: []string{"go"}, Hosts: []string{"proxy.golang.org", "sum.golang.org"}}, true
	case has("package.json"):
		e := Ecosystem{Name: "node", Caches: []string{"npm"}, Hosts: []string{"registry.npmjs.org"}}
		b, _ := readSmall(filepath.Join(dir, "package.json"))
		var pj struct {
			Scripts map[string]string `json:"scripts"`
		}
		if json.Unmarshal(b, &pj) != nil || strings.TrimSpace(pj.Scripts["test"]) == "" {
			return e, false
		}
		install, why := "npm install", "package.json has a test script"
		switch {
		case has("package-lock.json") || has("npm-shrinkwrap.json"):
			install, why = "npm ci", "package.json has a test script; package-lock.json"
		case has("pnpm-lock.yaml"):
			install, why = "pnpm install --frozen-lockfile", "package.json has a test script; pnpm-lock.yaml"
			e.Hosts = append(e.Hosts, "registry.yarnpkg.com")
		case has("yarn.lock"):
			install, why = "yarn install --frozen-lockfile", "package.json has a test script; yarn.lock"
			e.Hosts = append(e.Hosts, "registry.yarnpkg.com")
		}
		// The test script's tools (xo, jest, ...) are devDependencies:
		// installed first, or `npm test` finds none of them.
		test := strings.Fields(install)[0] + " test"
		e.Test, e.Why = []string{"sh", "-c", install + " && " + test}, why
		return e, true
	case has("Cargo.toml"):
		return Ecosystem{Name: "rust", Test: []string{"cargo", "test"}, Why: "Cargo.toml",
			Caches: []string{"cargo"}, Hosts: []string{"index.crates.io", "static.crates.io"}}, true
	case has("pyproject.toml") || has("requirements.txt"):
		e := Ecosystem{Name: "python", Caches: []string{"pip"}, Hosts: []string{"pypi.org", "files.pythonhosted.org"}}
		// A virtual environment in the worktree: the system's Python is
		// read-only in the sandbox, and each attempt gets its own.
		deps := "-e ."
		e.Why = "pyproject.toml"
		if has("requirements.txt") {
			deps, e.Why = "-r requirements.txt", "requirements.txt"
			if has("pyproject.toml") {
				deps, e.Why = "-r requirements.txt -e .", "pyproject.toml and requirements.txt"
			}
		}
		e.Test = []string{"sh", "-c", "python3 -m venv .venv && .venv/bin/pip install -q pytest " + deps + " && .venv/bin/python -m pytest"}
		return e, true
	}
	return Ecosystem{}, false
}
