package providers

import (
	"os"
	"path/filepath"
	"testing"
)

// The attack (continue_session): a sandboxed agent cannot see the user's
// real Gemini or Codex folders, but it can write a link to them in its own
// provider folder. kusaw, outside the sandbox, then keeps the attempt's
// session folders and carries them to the next attempt: through such a
// link it would move the user's real sessions into the state folder and
// hand them to the next sandboxed attempt. Every folder between the
// provider folder and the session folder must be a real folder.
func TestKeepSessionRefusesLinkedParent(t *testing.T) {
	for _, tc := range []struct{ provider, link, below string }{
		{"gemini", filepath.Join(GeminiHomeDir, ".gemini"), "tmp"},
		{"codex", CodexHomeDir, "sessions"},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			host := t.TempDir() // stands for the user's ~/.gemini or ~/.codex
			secret := filepath.Join(host, tc.below, "proj", "chats", "session-1.json")
			if err := os.MkdirAll(filepath.Dir(secret), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(secret, []byte(`{"sessionId":"s1","secret":"user"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			from, keep, next := t.TempDir(), t.TempDir(), t.TempDir()
			if err := os.MkdirAll(filepath.Dir(filepath.Join(from, tc.link)), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(from, tc.link)); err != nil {
				t.Fatal(err)
			}
			_ = KeepSession(tc.provider, from, keep)
			if _, err := os.Stat(secret); err != nil {
				t.Fatalf("the user's session file was moved away through the attempt's link: %v", err)
			}
			// The kept folder itself with a link planted the same way.
			if err := os.MkdirAll(filepath.Dir(filepath.Join(keep, tc.link)), 0o700); err != nil {
				t.Fatal(err)
			}
			_ = os.RemoveAll(filepath.Join(keep, tc.link))
			if err := os.Symlink(host, filepath.Join(keep, tc.link)); err != nil {
				t.Fatal(err)
			}
			_ = CarrySession(tc.provider, "s1", keep, next)
			_ = filepath.WalkDir(next, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					t.Errorf("the next attempt got %s, a file of the user's folder", p)
				}
				return nil
			})
		})
	}
}

// The twin: real session folders are kept and carried.
func TestKeepSessionRealFolders(t *testing.T) {
	for _, tc := range []struct{ provider, dir, file string }{
		{"gemini", filepath.Join(GeminiHomeDir, ".gemini", "tmp"), filepath.Join("proj", "chats", "session-1.json")},
		{"codex", filepath.Join(CodexHomeDir, "sessions"), filepath.Join("2026", "rollout-1.jsonl")},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			from, keep, next := t.TempDir(), t.TempDir(), t.TempDir()
			f := filepath.Join(from, tc.dir, tc.file)
			if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(`{"sessionId":"s1"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := KeepSession(tc.provider, from, keep); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(keep, tc.dir, tc.file)); err != nil {
				t.Fatalf("not kept: %v", err)
			}
			if err := CarrySession(tc.provider, "s1", keep, next); err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(next, tc.dir, tc.file)
			if tc.provider == "gemini" {
				want = filepath.Join(next, GeminiHomeDir, GeminiResumeFile)
			}
			if _, err := os.Stat(want); err != nil {
				t.Fatalf("not carried: %v", err)
			}
		})
	}
}
