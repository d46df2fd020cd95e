package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// ChatAPI is a fake OpenAI chat-completions API on loopback, what most
// OpenAI-compatible agent CLIs talk to (Qwen Code, opencode): every POST
// to .../chat/completions is answered, streamed (SSE) when the request
// asks for it, else in plain JSON. A request carrying fewer tool messages
// than Commands has gets the next command as a call of the shell tool the
// request offers; then the answer is Text. GET .../models lists one model.
type ChatAPI struct {
	URL  string
	Text string
	// WantKey, when set, makes requests whose bearer token differs fail
	// with 401, as the real API does.
	WantKey string
	// Commands are shell commands the fake asks the client to run, one
	// per request.
	Commands []string

	srv  *httptest.Server
	mu   sync.Mutex
	reqs []Request
}

// NewChatAPI starts the fake on 127.0.0.1 and stops it when t ends.
func NewChatAPI(t testing.TB, text string) *ChatAPI {
	t.Helper()
	m := &ChatAPI{Text: text}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL
	t.Cleanup(m.srv.Close)
	return m
}

// Requests returns the requests received so far.
func (m *ChatAPI) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.reqs...)
}

// Completions are the model requests received so far.
func (m *ChatAPI) Completions() []Request {
	var out []Request
	for _, r := range m.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/chat/completions") {
			out = append(out, r)
		}
	}
	return out
}

// shellTools are the names agent CLIs give their shell tool, and the
// arguments each takes besides the command.
var shellTools = map[string]map[string]any{
	"run_shell_command": {"description": "run it"}, // Qwen Code, Gemini CLI's fork
	"bash":              {"description": "run it"}, // opencode
	"shell":             {},
}

func (m *ChatAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	m.mu.Lock()
	m.reqs = append(m.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	want, cmds := m.WantKey, m.Commands
	m.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	if want != "" && r.Header.Get("authorization") != "Bearer "+want {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"Incorrect API key provided"}}`)
		return
	}
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models"):
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model","owned_by":"fake"}]}`)
		return
	case r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions"):
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"not found"}}`)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":%q}}`, err.Error())
		return
	}
	done := 0
	for _, msg := range req.Messages {
		if msg.Role == "tool" {
			done++
		}
	}
	msg := map[string]any{"role": "assistant", "content": m.Text}
	finish := "stop"
	if done < len(cmds) {
		name, args := "", map[string]any{}
		for _, t := range req.Tools {
			if extra, ok := shellTools[t.Function.Name]; ok && name == "" {
				name = t.Function.Name
				for k, v := range extra {
					args[k] = v
				}
			}
		}
		if name != "" {
			args["command"] = cmds[done]
			a, _ := json.Marshal(args)
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"index": 0, "id": fmt.Sprintf("call_fake%02d", done), "type": "function",
				"function": map[string]any{"name": name, "arguments": string(a)}}}}
			finish = "tool_calls"
		}
	}
	usage := map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110, "prompt_tokens_details": map[string]any{"cached_tokens": 20}}
	id := fmt.Sprintf("chatcmpl-fake%02d", done)
	if !req.Stream {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion", "created": 1, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		w.Write(b)
		return
	}
	w.Header().Set("content-type", "text/event-stream")
	chunk := func(choices []any, extra map[string]any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1, "model": req.Model, "choices": choices}
		for k, v := range extra {
			c[k] = v
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	chunk([]any{map[string]any{"index": 0, "delta": msg, "finish_reason": nil}}, nil)
	chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}, nil)
	chunk([]any{}, map[string]any{"usage": usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
}
