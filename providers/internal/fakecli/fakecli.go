// Package fakecli holds what the fake agent CLIs (fakeclaude, fakecursor)
// share: scenarios, recording argv and env, editing a file, fetching a URL
// and calling a Messages API. The fakes are test tools: they only ever
// talk to the URLs their environment names.
package fakecli

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Env variables that steer a fake.
const (
	EnvScenario = "FAKE_AGENT_SCENARIO"  // comma list; default "ok"
	EnvFile     = "FAKE_AGENT_FILE"      // file edit_file writes (relative to cwd); default FAKE_AGENT.md
	EnvContent  = "FAKE_AGENT_CONTENT"   // what edit_file writes
	EnvURL      = "FAKE_AGENT_URL"       // what fetch GETs
	EnvSleep    = "FAKE_AGENT_SLEEP"     // how long sleep waits (Go duration); default 30s
	EnvArgvFile = "FAKE_AGENT_ARGV_FILE" // if set, argv is written there as a JSON array
	EnvEnvFile  = "FAKE_AGENT_ENV_FILE"  // if set, the environment is written there as a JSON object
	EnvVersion  = "FAKE_AGENT_VERSION"   // overrides the version printed by --version
	EnvText     = "FAKE_AGENT_TEXT"      // the assistant's text in ok
	// EnvErrorText replaces the error result's text in is_error_exit0.
	EnvErrorText = "FAKE_AGENT_ERROR_TEXT"
	EnvTokens    = "FAKE_AGENT_TOKENS" // input tokens of each API message
	EnvMarker    = "FAKE_AGENT_MARKER" // argv word of the child hang_after_result leaves holding the pipes
)

// Scenarios every fake knows.
var Known = map[string]string{
	"ok":                 "a short successful run",
	"edit_file":          "write FAKE_AGENT_FILE in the working directory through a tool call",
	"call_api":           "call the Messages API at ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY (claude only)",
	"fetch":              "GET FAKE_AGENT_URL (through HTTPS_PROXY/HTTP_PROXY when set) as a tool call",
	"is_error_exit0":     "a result with is_error true (a rate limit) and exit code 0",
	"success_then_exit1": "a successful result, then exit code 1",
	"no_result":          "no result event, exit code 0",
	"crash":              "malformed output, no result, exit code 2",
	"sleep":              "wait FAKE_AGENT_SLEEP before the result",
	"hang_after_result":  "a successful result, then no exit for FAKE_AGENT_SLEEP (a child holds the output pipes too)",
	"error_then_hang":    "an error result, then no exit for FAKE_AGENT_SLEEP",
	"two_results":        "two result events, exit code 0",
	"api_error":          "init and user lines, then exit 1 with the API's error on stderr and no result (how the real CLIs fail)",
	"mcp":                "one MCP tool call (cursor only)",
}

// Scenarios parses FAKE_AGENT_SCENARIO; unknown names end the process with
// exit code 3 so a typo in a test never passes silently.
func Scenarios(prog string, supported func(string) bool) map[string]bool {
	s := os.Getenv(EnvScenario)
	if s == "" {
		s = "ok"
	}
	out := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if _, ok := Known[n]; !ok || !supported(n) {
			Fail(3, "%s: unknown scenario %q in %s", prog, n, EnvScenario)
		}
		out[n] = true
	}
	return out
}

// Fail prints a one-line error and exits.
func Fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(code)
}

// Record writes argv and env where the environment asks.
func Record() {
	if f := os.Getenv(EnvArgvFile); f != "" {
		b, _ := json.Marshal(os.Args)
		_ = os.WriteFile(f, b, 0o600)
	}
	if f := os.Getenv(EnvEnvFile); f != "" {
		m := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		b, _ := json.Marshal(m)
		_ = os.WriteFile(f, b, 0o600)
	}
}

// Emitter writes stream-json lines to stdout.
type Emitter struct{ W io.Writer }

// Emit writes one JSON line.
func (e Emitter) Emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		Fail(70, "fake: %v", err)
	}
	b = append(b, '\n')
	_, _ = e.W.Write(b)
}

// ID returns a random id with a prefix.
func ID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// UUID returns a random version-4 UUID.
func UUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// EditTarget is the file edit_file writes and its content.
func EditTarget(prog string) (string, string) {
	name := os.Getenv(EnvFile)
	if name == "" {
		name = "FAKE_AGENT.md"
	}
	content := os.Getenv(EnvContent)
	if content == "" {
		content = "written by " + prog + "\n"
	}
	if !filepath.IsAbs(name) {
		wd, err := os.Getwd()
		if err == nil {
			name = filepath.Join(wd, name)
		}
	}
	return name, content
}

// WriteFile writes the edit and says how it went.
func WriteFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// Fetch GETs url through the proxy the environment names (as a tool the
// agent runs would) and returns a one-line report.
func Fetch(url string) (string, bool) {
	if url == "" {
		return "FAKE_AGENT_URL is not set", false
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: envProxy}}
	resp, err := client.Get(url)
	if err != nil {
		return "fetch " + url + ": " + err.Error(), false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return fmt.Sprintf("%s %d %s", url, resp.StatusCode, line), resp.StatusCode < 400
}

// envProxy follows HTTPS_PROXY/HTTP_PROXY/NO_PROXY like most CLI tools
// (loopback targets are never proxied, as with curl and Node).
var envProxy = http.ProxyFromEnvironment

// CallMessages posts a one-message request to $ANTHROPIC_BASE_URL/v1/messages
// with $ANTHROPIC_API_KEY as x-api-key and returns the streamed text. It
// never falls back to the real API: without a base URL it fails.
func CallMessages(prompt string) (string, error) {
	// Like the real CLI, a request cut off on the way (a transport error,
	// not an HTTP status) is tried again; each retry is said on stderr.
	var err error
	for try := 1; try <= 3; try++ {
		var text string
		var status bool
		text, status, err = callMessagesOnce(prompt)
		if err == nil || status {
			return text, err
		}
		fmt.Fprintf(os.Stderr, "fake agent: the API call failed (%v); retrying\n", err)
		time.Sleep(time.Duration(try) * 200 * time.Millisecond)
	}
	return "", err
}

// callMessagesOnce makes one call; status is true when the error is the
// API's own answer (not worth a retry).
func callMessagesOnce(prompt string) (string, bool, error) {
	base := strings.TrimRight(os.Getenv("ANTHROPIC_BASE_URL"), "/")
	if base == "" {
		return "", true, fmt.Errorf("ANTHROPIC_BASE_URL is not set (the fake never calls the real API)")
	}
	body, _ := json.Marshal(map[string]any{
		"model":      "claude-fake",
		"max_tokens": 64,
		"stream":     true,
		"messages":   []any{map[string]any{"role": "user", "content": prompt}},
	})
	req, err := http.NewRequest("POST", base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return "", true, err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	if k := os.Getenv("ANTHROPIC_API_KEY"); k != "" {
		req.Header.Set("x-api-key", k)
	}
	if t := os.Getenv("ANTHROPIC_AUTH_TOKEN"); t != "" {
		req.Header.Set("authorization", "Bearer "+t)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: envProxy}}
	resp, err := client.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return "", true, fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Delta struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"delta"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) == nil && ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, err
	}
	return text.String(), false, nil
}

// SortedKeys lists a set's keys, sorted.
func SortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Sleep waits as FAKE_AGENT_SLEEP says.
func Sleep() {
	d, err := time.ParseDuration(os.Getenv(EnvSleep))
	if err != nil || d <= 0 {
		d = 30 * time.Second
	}
	time.Sleep(d)
}

// Hang is what a CLI does when it prints its result and then does not
// exit: it starts a child that keeps the output pipes open (as a leftover
// MCP server or shell would) and sleeps FAKE_AGENT_SLEEP.
func Hang() {
	if self, err := os.Executable(); err == nil {
		marker := os.Getenv(EnvMarker)
		if marker == "" {
			marker = "fake-agent-child"
		}
		cmd := exec.Command(self, HoldArg, marker)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		_ = cmd.Start()
	}
	Sleep()
}

// HoldArg is argv[1] of the child Hang starts.
const HoldArg = "__fake_agent_hold"

// MaybeHold runs the child Hang starts: it sleeps FAKE_AGENT_SLEEP and
// exits. Call it first in main.
func MaybeHold() {
	if len(os.Args) > 1 && os.Args[1] == HoldArg {
		Sleep()
		os.Exit(0)
	}
}

// Tokens is FAKE_AGENT_TOKENS: the input tokens each API message uses
// (def when unset).
func Tokens(def int) int {
	n, err := strconv.Atoi(os.Getenv(EnvTokens))
	if err != nil || n < 0 {
		return def
	}
	return n
}
