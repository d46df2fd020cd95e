package serve

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// Anyone who reaches the TCP port, token or not, chooses the request's
// path. serve's debug log in log_format: text goes to the operator's
// terminal and must carry it escaped (zerolog's console writer quotes it):
// %1b decoded into the log raw would be an escape sequence on that
// terminal (OSC 52 writes the clipboard).
func TestRequestLogEscapesThePath(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{log: zerolog.New(zerolog.ConsoleWriter{Out: &buf, NoColor: true}).Level(zerolog.DebugLevel)}
	h := s.logRequests(recoverJSON(s, requireToken("secret-token", http.NotFoundHandler(), http.NewServeMux())), true)
	srv := httptest.NewServer(h)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /v1/runs/%1b]52;c;cHduZWQ=%07 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, _ := io.ReadAll(conn)
	if !strings.Contains(string(resp), " 401 ") {
		t.Fatalf("answer: %q", resp)
	}
	if strings.ContainsAny(buf.String(), "\x1b\x07") {
		t.Fatalf("the request log carries the raw path: %q", buf.String())
	}
	// The twin: the request is logged, its path readable.
	if !strings.Contains(buf.String(), `/v1/runs/\x1b]52;c;cHduZWQ=`) || !strings.Contains(buf.String(), "401") {
		t.Fatalf("request log: %q", buf.String())
	}
}
