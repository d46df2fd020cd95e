//go:build linux

package sandbox

import (
	"bytes"
	"compress/zlib"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitAlt runs git on the host in the fixture's repository, reading the
// attempt's private objects too when alt is set.
func gitAlt(t *testing.T, f *fixture, alt bool, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("/usr/bin/git", append([]string{"-c", "safe.directory=*", "-C", f.repo}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+f.repo)
	if alt {
		cmd.Env = append(cmd.Env, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(f.attempt, "objects"))
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// looseIntact checks that README.md's loose object on the host still holds
// what its name says.
func looseIntact(t *testing.T, f *fixture) {
	oid, err := gitAlt(t, f, false, "rev-parse", "main:README.md")
	if err != nil {
		t.Fatalf("rev-parse: %v %s", err, oid)
	}
	b, err := os.ReadFile(filepath.Join(f.common, "objects", oid[:2], oid[2:]))
	if err != nil {
		t.Fatalf("the loose object of README.md is gone on the host: %v", err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the loose object of README.md was replaced (not zlib): %v", err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || string(got) != "blob 6\x00hello\n" {
		t.Errorf("the loose object of README.md was replaced: %q %v", got, err)
	}
}

func objectCases() []escapeCase {
	// $F is README.md's loose object in the repository's own objects/.
	const find = `O=$(git rev-parse HEAD:README.md) || exit 1; D=$(echo $O | cut -c1-2); F=$COMMON/objects/$D/$(echo $O | cut -c3-); test -f $F || { echo "no loose object $F"; exit 1; }; `
	return []escapeCase{
		{name: "replace a loose object of the repository",
			attack: find + `refused rm -f $F; refused sh -c "printf evil > $F"; printf evil > $TMP/evil; refused mv -f $TMP/evil $F; refused mv $F $COMMON/objects/$D/moved; ` +
				`refused chmod u+w $F; refused sh -c "chmod u+w $F; printf evil >> $F"; refused mkdir $COMMON/objects/zz; refused rm -rf $COMMON/objects/$D; ` +
				// Without kusaw's variables git falls back to the repository's objects/, which stay read-only.
				`refused sh -c 'unset GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES; echo z > $WT/z.txt && git add z.txt'; rm -f $WT/z.txt; exit 42`,
			twin:  `cd $WT && echo o > o.txt && git add o.txt && git commit -q -m objtwin && git log -1 --format=%s | grep -qx objtwin && git cat-file -e HEAD:README.md`,
			edit:  withObjectDir,
			check: looseIntact,
			twinHost: func(t *testing.T, f *fixture) {
				looseIntact(t, f)
				c, err := gitAlt(t, f, true, "rev-parse", "kusaw/r1/build/1")
				if err != nil {
					t.Fatalf("rev-parse: %v %s", err, c)
				}
				if s, err := gitAlt(t, f, true, "log", "-1", "--format=%s", c); err != nil || s != "objtwin" {
					t.Errorf("the commit made inside: %q %v", s, err)
				}
				// The step's objects are in its private folder, not the repository.
				if out, err := gitAlt(t, f, false, "cat-file", "-e", c); err == nil {
					t.Errorf("the commit made inside is in the repository's own objects: %s", out)
				}
				if _, err := os.Stat(filepath.Join(f.attempt, "objects", c[:2], c[2:])); err != nil {
					t.Errorf("the commit made inside is not in the private object folder: %v", err)
				}
			}},
	}
}
