package early

import (
	"os"
	"path/filepath"
	"testing"
)

// Applies takes exactly sandbox exec -- CMD with no factory file and no
// setting; everything else is main's.
func TestApplies(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	for _, e := range SettingsEnv {
		t.Setenv(e, "")
	}
	exec := []string{"sandbox", "exec", "--", "true"}
	for _, c := range []struct {
		args []string
		want bool
	}{
		{exec, true},
		{[]string{"sandbox", "exec", "--", "sh", "-c", "exit 3"}, true},
		{[]string{"sandbox", "exec", "--"}, false},
		{[]string{"sandbox", "exec", "true"}, false},
		{[]string{"sandbox", "exec", "--step", "s", "--", "true"}, false},
		{[]string{"-f", "x.yaml", "sandbox", "exec", "--", "true"}, false},
		{[]string{"sandbox", "doctor"}, false},
		{[]string{"version"}, false},
		{nil, false},
	} {
		if got := Applies(c.args); got != c.want {
			t.Errorf("Applies(%q) = %v, want %v", c.args, got, c.want)
		}
	}
	for _, e := range SettingsEnv {
		t.Run(e, func(t *testing.T) {
			t.Setenv(e, "x")
			if Applies(exec) {
				t.Errorf("taken with %s set", e)
			}
		})
	}
	f := filepath.Join(cfg, "kusaw", "config.yaml")
	if SettingsFile() != f {
		t.Fatalf("SettingsFile() = %q, want %q", SettingsFile(), f)
	}
	if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if Applies(exec) {
		t.Error("taken with a settings file (even an empty one)")
	}
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("factory.yaml", []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if Applies(exec) {
		t.Error("taken with a factory.yaml here")
	}
	if err := os.Remove("factory.yaml"); err != nil {
		t.Fatal(err)
	}
	if !Applies(exec) {
		t.Error("not taken once the factory file and the settings are gone")
	}
}
