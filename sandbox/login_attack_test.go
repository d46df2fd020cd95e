package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCarryBackKeepsTheUsersLogin: the step writes its login folder's
// credentials file, which kusaw carries back to the user's. From inside, a
// step empties it ({}: the user is signed out) or plants one where the
// user had none (their next CLI session signs in as someone else): neither
// reaches the user's folder. The twin: a refresh that changes the token,
// and one that adds a key (an MCP server's sign-in), are carried back.
func TestCarryBackKeepsTheUsersLogin(t *testing.T) {
	dir := t.TempDir()
	user := filepath.Join(dir, "user.json")
	const login = `{"claudeAiOauth":{"accessToken":"old","refreshToken":"r1"}}`
	write(t, user, login)
	emptied := filepath.Join(dir, "emptied.json")
	write(t, emptied, `{}`)
	if err := carryBack(emptied, user); err == nil {
		t.Error("an emptied login was carried back")
	}
	if b, _ := os.ReadFile(user); string(b) != login {
		t.Fatalf("the user's login changed: %q", b)
	}
	none := filepath.Join(dir, "none.json")
	planted := filepath.Join(dir, "planted.json")
	write(t, planted, `{"OPENAI_API_KEY":"sk-attacker"}`)
	if err := carryBack(planted, none); err != nil || exists(none) {
		t.Errorf("a login the user did not have was planted (err %v)", err)
	}
	for _, refreshed := range []string{
		`{"claudeAiOauth":{"accessToken":"new","refreshToken":"r2"}}`,
		`{"claudeAiOauth":{"accessToken":"new","refreshToken":"r2"},"mcpOAuth":{"srv":{"accessToken":"m"}}}`,
	} {
		from := filepath.Join(dir, "refreshed.json")
		write(t, from, refreshed)
		if err := carryBack(from, user); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(user); string(b) != refreshed {
			t.Errorf("the refreshed login was not carried back: %q", b)
		}
	}
}
