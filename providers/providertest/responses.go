package providertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// ResponsesAPI is a fake OpenAI Responses API on loopback (what Codex CLI
// talks to): every POST to /v1/responses gets a streamed (SSE) answer. A
// request whose input carries fewer function_call_output items than
// Commands has gets the next command as a shell tool call; once each has
// its output the answer is Text.
type ResponsesAPI struct {
	URL  string
	Text string
	// WantKey, when set, makes requests whose bearer token differs fail
	// with 401, as the real API does.
	WantKey string
	// Commands are shell commands the fake asks the client to run, one
	// per request.
	Commands []string
	// FailFirst makes the first n model requests fail with 400 (a
	// refused request the client does not retry): a failed attempt.
	FailFirst int

	srv  *httptest.Server
	mu   sync.Mutex
	reqs []Request
}

// NewResponsesAPI starts the fake on 127.0.0.1 and stops it when t ends.
func NewResponsesAPI(t testing.TB, text string) *ResponsesAPI {
	t.Helper()
	m := &ResponsesAPI{Text: text}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL
	t.Cleanup(m.srv.Close)
	return m
}

// Requests returns the requests received so far.
func (m *ResponsesAPI) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.reqs...)
}

func (m *ResponsesAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	m.mu.Lock()
	m.reqs = append(m.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	want, cmds := m.WantKey, m.Commands
	fail := m.FailFirst > 0 && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses")
	if fail {
		m.FailFirst--
	}
	m.mu.Unlock()
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"not found"}}`)
		return
	}
	if want != "" && r.Header.Get("authorization") != "Bearer "+want {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"Incorrect API key provided"}}`)
		return
	}
	if fail {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"invalid_value","message":"the request was refused (FailFirst)"}}`)
		return
	}
	done := bytes.Count(body, []byte(`"type":"function_call_output"`))
	w.Header().Set("content-type", "text/event-stream")
	seq := 0
	ev := func(name string, data map[string]any) {
		data["type"] = name
		data["sequence_number"] = seq
		seq++
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	}
	id := fmt.Sprintf("resp_fake%02d", done)
	ev("response.created", map[string]any{"response": map[string]any{"id": id, "object": "response", "status": "in_progress", "model": "gpt-fake-1"}})
	var item map[string]any
	if done < len(cmds) {
		item = shellCall(body, cmds[done], done)
	} else {
		item = map[string]any{"type": "message", "id": "msg_" + id, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": m.Text, "annotations": []any{}}}}
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": map[string]any{"type": "message", "id": "msg_" + id, "role": "assistant", "status": "in_progress", "content": []any{}}})
		ev("response.output_text.delta", map[string]any{"output_index": 0, "content_index": 0, "item_id": "msg_" + id, "delta": m.Text})
	}
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	ev("response.completed", map[string]any{"response": map[string]any{"id": id, "object": "response", "status": "completed", "model": "gpt-fake-1",
		"output": []any{item},
		"usage": map[string]any{"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 20},
			"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 3}, "total_tokens": 110}}})
}

// shellCall is a function_call item running cmd through whichever shell
// tool the request offers (its name and argument shape changed across
// Codex releases).
func shellCall(body []byte, cmd string, n int) map[string]any {
	var req struct {
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	name, args := "shell", map[string]any{"command": []string{"bash", "-lc", cmd}}
	for _, t := range req.Tools {
		switch t.Name {
		case "exec_command":
			name, args = t.Name, map[string]any{"cmd": cmd}
		case "shell_command":
			name, args = t.Name, map[string]any{"command": cmd}
		}
	}
	a, _ := json.Marshal(args)
	return map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_fake%02d", n), "call_id": fmt.Sprintf("call_fake%02d", n),
		"name": name, "arguments": string(a), "status": "completed"}
}
