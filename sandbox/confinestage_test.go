//go:build linux

package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/sandbox/confine"
	"github.com/kusaw/kusaw/status"
)

// withStage runs f with the confinement stage's program replaced (nil:
// none found) and ConfineProgram's path set to by.
func withStage(t *testing.T, prog []string, by string, f func()) {
	t.Helper()
	confineProgram() // the stage is chosen once; replace the choice
	confineMu.Lock()
	oldProg, oldBy := confineProg, confineBy
	confineProg, confineBy = prog, by
	confineMu.Unlock()
	defer func() {
		confineMu.Lock()
		confineProg, confineBy = oldProg, oldBy
		confineMu.Unlock()
	}()
	f()
}

// A program set up with a confinement stage (kusaw-daemon names kusaw)
// whose program is gone does not run an attempt without Landlock and the
// fresh session keyring: the plan is refused as the sandbox being
// unavailable, in one line naming kusaw-bridge and where it goes. A
// program that never had a stage runs, and the plan it records names the
// missing layers; the twin, with the stage, names none.
func TestMissingConfineStage(t *testing.T) {
	f := newFixture(t)
	gone := filepath.Join(t.TempDir(), "kusaw")
	withStage(t, nil, gone, func() {
		_, err := BuildPlan(f.input())
		var se *status.Error
		if !errors.As(err, &se) || se.Reason != status.ReasonSandboxUnavailable || !strings.Contains(se.Msg, gone+" is missing") ||
			!strings.Contains(se.Msg, "session keyring") || !strings.Contains(se.Fix, "put kusaw-bridge beside "+executable()) || strings.Contains(se.Msg+se.Fix, "\n") {
			t.Fatalf("a missing stage program: %v", err)
		}
		if abi, _ := confine.LandlockABI(); abi >= 1 && !strings.Contains(se.Msg, "Landlock") {
			t.Errorf("the refusal does not name Landlock: %s", se.Msg)
		}
		for _, l := range KernelLayers(Check()) {
			if (l.Name == "landlock" || l.Name == "keyring") && (l.Active || !strings.Contains(l.Detail, "refused")) {
				t.Errorf("sandbox check --verbose: %+v", l)
			}
		}
	})
	withStage(t, nil, "", func() {
		p, err := BuildPlan(f.input())
		if err != nil {
			t.Fatal(err)
		}
		if len(p.LayersMissing) != 1 || !strings.Contains(p.LayersMissing[0], "no confinement stage") ||
			!strings.Contains(string(p.JSON()), `"layers_missing":[`) || !strings.Contains(p.String(), "layer missing: ") {
			t.Errorf("the plan does not name the missing layers: %v", p.LayersMissing)
		}
	})
	exe, _ := os.Executable()
	withStage(t, []string{exe, confine.Subcommand}, gone, func() {
		p, err := BuildPlan(f.input())
		if err != nil || len(p.LayersMissing) != 0 || strings.Contains(string(p.JSON()), "layers_missing") {
			t.Errorf("with the stage: %v %v", err, p.LayersMissing)
		}
	})
}
