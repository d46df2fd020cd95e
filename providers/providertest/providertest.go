// Package providertest gives tests the fake agent CLIs and a fake
// Anthropic Messages API on loopback.
//
// Build compiles providers/internal/fakeclaude, fakecursor, fakecodex and
// fakegemini into a folder as `claude`, `agent`, `cursor-agent`, `codex`
// and `gemini`; point providers.<name>.command
// at them (or put the folder first on PATH). They are steered through env
// (FAKE_AGENT_SCENARIO and friends, see providers/internal/fakecli).
package providertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Scenario names and env variables the fakes understand.
const (
	EnvScenario = "FAKE_AGENT_SCENARIO"
	EnvFile     = "FAKE_AGENT_FILE"
	EnvContent  = "FAKE_AGENT_CONTENT"
	EnvURL      = "FAKE_AGENT_URL"
	EnvSleep    = "FAKE_AGENT_SLEEP"
	EnvArgvFile = "FAKE_AGENT_ARGV_FILE"
	EnvEnvFile  = "FAKE_AGENT_ENV_FILE"
	EnvVersion  = "FAKE_AGENT_VERSION"
	EnvText     = "FAKE_AGENT_TEXT"
	EnvTokens   = "FAKE_AGENT_TOKENS" // input tokens of each API message
	EnvMarker   = "FAKE_AGENT_MARKER" // argv word of the child hang_after_result leaves running
)

// Fakes are the paths of the built fake CLIs.
type Fakes struct {
	Dir         string
	Claude      string // behaves like `claude`
	Cursor      string // behaves like `agent`
	CursorAgent string // the same program under Cursor's older name
	Codex       string // behaves like `codex`
	Gemini      string // behaves like `gemini`
}

const pkg = "github.com/kusaw/kusaw/providers/internal/"

// Build compiles both fakes into dir with the go tool (the build cache
// makes repeated builds cheap).
func Build(dir string) (Fakes, error) {
	goTool := "go"
	if _, err := exec.LookPath(goTool); err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	f := Fakes{Dir: dir, Claude: filepath.Join(dir, "claude"), Cursor: filepath.Join(dir, "agent"), CursorAgent: filepath.Join(dir, "cursor-agent"),
		Codex: filepath.Join(dir, "codex"), Gemini: filepath.Join(dir, "gemini")}
	for _, b := range []struct{ out, pkg string }{{f.Claude, pkg + "fakeclaude"}, {f.Cursor, pkg + "fakecursor"}, {f.Codex, pkg + "fakecodex"}, {f.Gemini, pkg + "fakegemini"}} {
		cmd := exec.Command(goTool, "build", "-o", b.out, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return Fakes{}, fmt.Errorf("go build %s: %v: %s", b.pkg, err, bytes.TrimSpace(out))
		}
	}
	if err := os.Link(f.Cursor, f.CursorAgent); err != nil {
		b, err := os.ReadFile(f.Cursor)
		if err != nil {
			return Fakes{}, err
		}
		if err := os.WriteFile(f.CursorAgent, b, 0o755); err != nil {
			return Fakes{}, err
		}
	}
	return f, nil
}

// BuildT builds the fakes into a temporary folder of t.
func BuildT(t testing.TB) Fakes {
	t.Helper()
	f, err := Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Request is one request the fake API received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// MessagesAPI is a fake Anthropic Messages API on loopback: every POST to
// /v1/messages gets a short streamed (SSE) or plain JSON answer with Text.
type MessagesAPI struct {
	URL  string
	Text string
	// WantKey, when set, makes requests whose x-api-key differs fail
	// with 401, as the real API does (inject tests check the proxy's key).
	// Set it before requests arrive.
	WantKey string
	// Tools, when set, are answered first, one per request, as tool_use
	// blocks: a request carrying n tool_result blocks gets Tools[n], and
	// once every tool has its result the answer is Text. Set it before
	// requests arrive.
	Tools []ToolUse
	// FailUnless, when set, makes every Messages request whose body lacks
	// it fail with 400: Claude Code retries a refused request in other
	// shapes, so a failed attempt is one whose every request is refused
	// (a fix loop's next attempt carries kusaw's note, for one). Set it
	// before requests arrive.
	FailUnless string

	srv  *httptest.Server
	mu   sync.Mutex
	reqs []Request
}

// ToolUse is a tool call the fake API asks the client to make.
type ToolUse struct {
	Name  string
	Input map[string]any
}

// NewMessagesAPI starts the fake on 127.0.0.1 and stops it when t ends.
func NewMessagesAPI(t testing.TB, text string) *MessagesAPI {
	t.Helper()
	m := StartMessagesAPI(text)
	t.Cleanup(m.Close)
	return m
}

// StartMessagesAPI starts the fake on 127.0.0.1; Close stops it.
func StartMessagesAPI(text string) *MessagesAPI {
	m := &MessagesAPI{Text: text}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL
	return m
}

// Close stops the server.
func (m *MessagesAPI) Close() { m.srv.Close() }

// Requests returns the requests received so far.
func (m *MessagesAPI) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.reqs...)
}

func (m *MessagesAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	m.mu.Lock()
	m.reqs = append(m.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	m.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		// Claude Code also probes the base URL (HEAD /); anything but
		// the Messages endpoint is simply not found.
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type":"error","error":{"type":"not_found_error","message":"not found"}}`)
		return
	}
	m.mu.Lock()
	want := m.WantKey
	m.mu.Unlock()
	if want != "" && r.Header.Get("x-api-key") != want {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		return
	}
	m.mu.Lock()
	fail := m.FailUnless != "" && !bytes.Contains(body, []byte(m.FailUnless))
	m.mu.Unlock()
	if fail {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"type":"error","error":{"type":"invalid_request_error","message":"refused by the fake (FailUnless)"}}`)
		return
	}
	done := bytes.Count(body, []byte(`"type":"tool_result"`))
	m.mu.Lock()
	var tool *ToolUse
	if done < len(m.Tools) {
		tool = &m.Tools[done]
	}
	m.mu.Unlock()
	if tool != nil {
		m.serveTool(w, body, *tool, done)
		return
	}
	text := jsonString(m.Text)
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_fake","type":"message","role":"assistant","model":"claude-fake-1","content":[{"type":"text","text":%s}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}`, text)
		return
	}
	w.Header().Set("content-type", "text/event-stream")
	ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
	ev("message_start", `{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":"claude-fake-1","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`)
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+text+`}}`)
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`)
	ev("message_stop", `{"type":"message_stop"}`)
}

func (m *MessagesAPI) serveTool(w http.ResponseWriter, body []byte, t ToolUse, n int) {
	id := fmt.Sprintf("toolu_fake%02d", n)
	input, _ := json.Marshal(t.Input)
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_fake","type":"message","role":"assistant","model":"claude-fake-1","content":[{"type":"tool_use","id":%q,"name":%q,"input":%s}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}`, id, t.Name, input)
		return
	}
	w.Header().Set("content-type", "text/event-stream")
	ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
	ev("message_start", `{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":"claude-fake-1","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`)
	ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, id, t.Name))
	ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+jsonString(string(input))+`}}`)
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}`)
	ev("message_stop", `{"type":"message_stop"}`)
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
