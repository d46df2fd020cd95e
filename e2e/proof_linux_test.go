package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Linux: the reaper of unsandboxed steps is Linux's (a child subreaper);
// on macOS recovery alone ends what a step left (internal/proc tests).

// kill -9 of kusaw run while an unsandboxed step runs with background
// children (one of them in a session of its own): the reaper between
// kusaw and the step ends them all when kusaw dies, before any other kusaw
// command runs. (When the reaper dies too, recovery ends what is left of
// the group: factory's TestRecoveryEndsWhatTheProcessLeft.)
func TestProofKill9LeavesNoStepProcess(t *testing.T) {
	const yaml = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [slow, after]
steps:
  slow:
    sandbox: "off"
    run: [sh, -c, 'sleep 300 & echo $! > "$KUSAW_ARTIFACTS/pids"; (sleep 300; true) & echo $! >> "$KUSAW_ARTIFACTS/pids"; SETSID; wait']
  after:
    run: ["true"]
`
	start := func(t *testing.T, setsid string) (dir, id string, reaper int, pids []int, cmd *exec.Cmd) {
		dir = factoryDir(t, strings.Replace(yaml, "SETSID", setsid, 1), "app")
		cmd, _, _ = startKusaw(t, dir, "run")
		id, reaper = waitProcess(t, dir)
		pidFile := filepath.Join(dir, ".kusaw", "runs", id, "steps", "slow", "1", "artifacts", "pids")
		want := 2
		if setsid != "true" {
			want = 3
		}
		waitFor(t, "the step's background children", 20*time.Second, func() bool {
			b, err := os.ReadFile(pidFile)
			pids = pids[:0]
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					pids = append(pids, n)
				}
			}
			return err == nil && len(pids) == want
		})
		t.Cleanup(func() {
			for _, p := range pids {
				syscall.Kill(p, syscall.SIGKILL)
			}
		})
		return dir, id, reaper, pids, cmd
	}
	allGone := func(pids []int) func() bool {
		return func() bool {
			for _, p := range pids {
				if alive(p) {
					return false
				}
			}
			return true
		}
	}

	t.Run("reaper", func(t *testing.T) {
		_, _, _, pids, cmd := start(t, `setsid sleep 300 & echo $! >> "$KUSAW_ARTIFACTS/pids"`)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		// No kusaw command runs: the reaper alone ends them.
		waitFor(t, "every process of the step to end with kusaw", 5*time.Second, allGone(pids))
	})

}

// alive is a process that exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
