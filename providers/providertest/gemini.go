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

// GeminiAPI is a fake Gemini API (generativelanguage) on loopback, what
// Gemini CLI talks to with an API key: streamGenerateContent answers in
// SSE, generateContent (the CLI's model router and other side requests)
// in plain JSON. A request carrying fewer functionResponse parts than
// Writes has gets the next write as a write_file call; then the answer
// is Text.
type GeminiAPI struct {
	URL  string
	Text string
	// WantKey, when set, makes requests whose x-goog-api-key differs fail
	// with 400 API_KEY_INVALID, as the real API does.
	WantKey string
	// Writes are files the fake asks the client to write (path relative
	// to the client's working directory, and content), one per request.
	Writes []GeminiWrite
	// FailToolResultsUnless, when set, makes every streamGenerateContent
	// request that answers a tool call (carries a functionResponse) and
	// lacks it fail with 400: an attempt that fails after its first turn
	// (Gemini CLI drops a turn that failed from its session, so a session
	// continued later has that first turn). A fix loop's next attempt
	// carries kusaw's note, for one. Set it before requests arrive.
	FailToolResultsUnless string

	srv  *httptest.Server
	mu   sync.Mutex
	reqs []Request
}

// GeminiWrite is one write_file call.
type GeminiWrite struct{ Path, Content string }

// NewGeminiAPI starts the fake on 127.0.0.1 and stops it when t ends.
func NewGeminiAPI(t testing.TB, text string) *GeminiAPI {
	t.Helper()
	m := &GeminiAPI{Text: text}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL
	t.Cleanup(m.srv.Close)
	return m
}

// Requests returns the requests received so far.
func (m *GeminiAPI) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.reqs...)
}

func (m *GeminiAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	m.mu.Lock()
	m.reqs = append(m.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	want, writes, failUnless := m.WantKey, m.Writes, m.FailToolResultsUnless
	m.mu.Unlock()
	w.Header().Set("content-type", "application/json")
	stream := strings.HasSuffix(r.URL.Path, ":streamGenerateContent")
	if r.Method != http.MethodPost || !stream && !strings.HasSuffix(r.URL.Path, ":generateContent") {
		if strings.HasSuffix(r.URL.Path, ":countTokens") {
			fmt.Fprint(w, `{"totalTokens":10}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":404,"message":"not found","status":"NOT_FOUND"}}`)
		return
	}
	if want != "" && r.Header.Get("x-goog-api-key") != want {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}`)
		return
	}
	if stream && failUnless != "" && bytes.Contains(body, []byte(`"functionResponse"`)) && !bytes.Contains(body, []byte(failUnless)) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":400,"message":"refused by the fake (FailToolResultsUnless)","status":"INVALID_ARGUMENT"}}`)
		return
	}
	usage := map[string]any{"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 115, "cachedContentTokenCount": 20, "thoughtsTokenCount": 5}
	if !stream {
		// The router asks which model to use, in JSON.
		text := `{"reasoning":"a simple task","model_choice":"flash","complexity_reasoning":"a simple task","complexity_score":10}`
		b, _ := json.Marshal(map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}}, "finishReason": "STOP", "index": 0}},
			"usageMetadata": usage, "modelVersion": "gemini-fake-1"})
		w.Write(b)
		return
	}
	done := bytes.Count(body, []byte(`"functionResponse"`))
	var parts []any
	if done < len(writes) {
		parts = []any{map[string]any{"functionCall": map[string]any{"name": "write_file", "args": map[string]any{"file_path": writes[done].Path, "content": writes[done].Content}}}}
	} else {
		parts = []any{map[string]any{"text": m.Text}}
	}
	w.Header().Set("content-type", "text/event-stream")
	b, _ := json.Marshal(map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": usage, "modelVersion": "gemini-fake-1", "responseId": fmt.Sprintf("resp-fake-%02d", done)})
	fmt.Fprintf(w, "data: %s\n\n", b)
}
