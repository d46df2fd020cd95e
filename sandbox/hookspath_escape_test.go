//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestHooksPathOutsideTheWorktreeCannotBeReplaced: core.hooksPath names
// a folder outside the worktree in a folder the step may write
// (allow_write of a shared tools folder), whose pre-commit the user's
// next commit runs outside. It was left writable (the worktree was
// planned before allow_write was mounted, so the folder did not look
// writable then), and the folder above it, had it been protected, was a
// plain folder the step could rename to make a hooks folder of its own.
// Now the hooks folder is read-only (a stand-in when missing) and the
// folders leading to it in the writable folder are bound on themselves,
// as those in a worktree are. The legitimate twin: the step still writes
// the shared folder, beside the hooks.
func TestHooksPathOutsideTheWorktreeCannotBeReplaced(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	for _, missing := range []bool{false, true} {
		t.Run(fmt.Sprint("missing=", missing), func(t *testing.T) {
			f := newFixture(t)
			area := filepath.Join(f.root, "shared-tools")
			hooks := filepath.Join(area, "team", "hooks")
			const benign = "#!/bin/sh\nexit 0\n"
			if missing {
				os.MkdirAll(filepath.Dir(hooks), 0o755)
			} else {
				write(t, filepath.Join(hooks, "pre-commit"), benign)
			}
			git(t, f.repo, "config", "core.hooksPath", hooks)
			in := f.input()
			in.AllowWrite = []string{area}
			p := mustPlan(t, in)
			script := fmt.Sprintf(`touch %[1]s/ok || { echo "cannot write the shared folder"; exit 3; }
if mkdir -p %[2]s 2>/dev/null && echo owned > %[2]s/pre-commit 2>/dev/null; then echo "wrote the hooks"; exit 0; fi
mv %[1]s/team %[1]s/team-moved 2>/dev/null || exit 0
mkdir -p %[2]s && printf '#!/bin/sh\necho owned\n' > %[2]s/pre-commit && chmod +x %[2]s/pre-commit
echo replaced`, area, hooks)
			out, err := runPlan(t, p, script)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got, _ := os.ReadFile(filepath.Join(hooks, "pre-commit"))
			if want := map[bool]string{false: benign, true: ""}[missing]; string(got) != want {
				t.Errorf("the step replaced the hooks folder core.hooksPath names: pre-commit is %q (%s)", got, out)
			}
			if !exists(filepath.Join(area, "ok")) {
				t.Errorf("the step could not write the shared folder: %s", out)
			}
		})
	}
}
