package attempt

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

func TestRedactorAcrossReads(t *testing.T) {
	r := &Redactor{}
	r.Add("abcdefgh")
	r.Add(`q"uote`)
	r.Add("ab") // too short to redact: left alone
	in := strings.Repeat("x", 100) + "abcdefgh" + strings.Repeat("y", 7) + `q"uote` + " ab abcdefg"
	var out bytes.Buffer
	// One byte per read: every possible split of a secret.
	if err := r.CopyRedacted(&out, iotest.OneByteReader(strings.NewReader(in))); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("x", 100) + "<secret>" + strings.Repeat("y", 7) + "<secret>" + " ab abcdefg"
	if out.String() != want {
		t.Errorf("got %q\nwant %q", out.String(), want)
	}
	// Inside JSON the escaped form is found too.
	if got := r.String(`{"v":"q\"uote"}`); got != `{"v":"<secret>"}` {
		t.Errorf("json form: %q", got)
	}
}

// The process group, signals and grace are tested in internal/proc; this
// checks the host hands its grace and redactor through.
func TestRunProcessRedactsAndStops(t *testing.T) {
	h := &Host{KillGrace: 300 * time.Millisecond}
	red := &Redactor{}
	red.Add("s3cr3t-value")
	var out, errb bytes.Buffer
	res := h.runProcess(context.Background(), 0, exec.Command("sh", "-c", "echo token s3cr3t-value"), &out, &errb, nil, red)
	if res.startErr != nil || res.exit != 0 || strings.Contains(out.String(), "s3cr3t") || !strings.Contains(out.String(), "token") {
		t.Fatalf("result %+v, output %q", res, out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res = h.runProcess(ctx, 0, exec.Command("sh", "-c", `trap "" TERM; while :; do sleep 0.05; done`), &out, &errb, nil, nil)
	if res.signal != "killed" || !res.stopped {
		t.Errorf("not killed after the engine's grace: %+v", res)
	}
}

// A complete line is passed on at once, not held back until EOF: an
// agent's result line must reach the parser while the agent still runs.
// A secret that spans lines is still caught across reads.
func TestRedactorPassesCompleteLines(t *testing.T) {
	r := &Redactor{}
	r.Add("a-long-secret-value-0123456789")
	pr, pw := io.Pipe()
	got := make(chan string, 1)
	var out syncWriter
	go func() { _ = r.CopyRedacted(&out, pr); got <- out.String() }()
	pw.Write([]byte(`{"type":"result","is_error":false}` + "\n"))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(out.String(), "}\n") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if out.String() != `{"type":"result","is_error":false}`+"\n" {
		t.Fatalf("the complete line was held back: %q", out.String())
	}
	pw.Write([]byte("a-long-secret-"))
	pw.Write([]byte("value-0123456789 tail"))
	pw.Close()
	if s := <-got; strings.Contains(s, "0123456789") || !strings.HasSuffix(s, "<secret> tail") {
		t.Fatalf("secret split across reads: %q", s)
	}

	m := &Redactor{}
	m.Add("line-one\nline-two")
	var mo bytes.Buffer
	if err := m.CopyRedacted(&mo, iotest.OneByteReader(strings.NewReader("x line-one\nline-two y\n"))); err != nil {
		t.Fatal(err)
	}
	if mo.String() != "x <secret> y\n" {
		t.Fatalf("a secret spanning lines: %q", mo.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
