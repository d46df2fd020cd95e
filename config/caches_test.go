package config

import (
	"path/filepath"
	"testing"
)

// TestGoPresetKeepsBuildCache: the go preset sets the module cache and
// the build cache, so the second run of a Go project's tests is warm; a
// cache with an env of its own sets only that.
func TestGoPresetKeepsBuildCache(t *testing.T) {
	c := &Cache{Name: "go", Env: "GOMODCACHE", Path: "/s/caches/go"}
	v := c.Vars()
	if v["GOMODCACHE"] != filepath.Join("/s/caches/go", "mod") || v["GOCACHE"] != filepath.Join("/s/caches/go", "build") || len(v) != 2 {
		t.Fatalf("go preset: %v", v)
	}
	own := &Cache{Name: "go", Env: "MYCACHE", Path: "/x"}
	if v := own.Vars(); len(v) != 1 || v["MYCACHE"] != "/x" {
		t.Fatalf("own env: %v", v)
	}
	if v := (&Cache{Name: "npm", Env: "npm_config_cache", Path: "/n"}).Vars(); v["npm_config_cache"] != "/n" || len(v) != 1 {
		t.Fatalf("npm: %v", v)
	}
}
