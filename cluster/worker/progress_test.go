package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/cluster"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/status"
	"github.com/nats-io/nats.go/jetstream"
)

const sleepy = `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [nap]
steps:
  nap:
    run: [sh, -c, 'sleep 3; echo rested > rested.txt']
`

// logLines collects what a worker reports.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logLines) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// Attacker's side (the infrastructure's, here): w1 claims an attempt and
// then its connection dies, so its progress acknowledgements and
// heartbeats stop. Serve ends the attempt lost and dispatches it anew; w2,
// which joins after that, runs the new attempt and never the old one,
// although the old message went unacknowledged for many times its ack
// wait: serve deleted it when it gave the attempt up.
func TestLostWorkerWorkNotRunAgain(t *testing.T) {
	r := startServe(t, sleepy, 2*time.Second)
	ackWait := time.Second
	w1, stop1 := r.startWorkerWith(t, "w1", Options{AckWait: ackWait, MaxParallel: 1}, nil)
	ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
	defer cancel()
	done := make(chan *factory.Run, 1)
	go func() {
		run, err := r.e.Run(ctx, "")
		if err != nil {
			t.Error(err)
		}
		done <- run
	}()
	var first string
	for first == "" {
		if ctx.Err() != nil {
			t.Fatal("w1 never claimed the attempt")
		}
		w1.mu.Lock()
		for id := range w1.running {
			first = id
		}
		w1.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	// w1 is cut off: no progress, no heartbeat, no report.
	w1.nc.Close()
	stop1()
	// Serve gives the attempt up: it revokes w1's claim.
	_, _, watch := r.enrolled(t, "watcher")
	for {
		if ctx.Err() != nil {
			t.Fatal("serve never gave up w1's attempt")
		}
		if _, tok, err := watch.Holder(ctx, "default", first); err == nil && tok == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	var log2 logLines
	r.startWorkerWith(t, "w2", Options{AckWait: ackWait, MaxParallel: 2, Logf: log2.logf}, nil)
	run := <-done
	if run == nil {
		t.FailNow()
	}
	// Well past the old message's ack wait.
	time.Sleep(3 * ackWait)
	if got := log2.with("attempt " + first + ": claimed"); len(got) > 0 {
		t.Errorf("w2 ran the lost attempt %s again: %v", first, got)
	}
	atts, _ := r.e.State.Attempts(run.Record)
	if run.Record.State != status.RunSucceeded || len(atts) != 2 || atts[0].Outcome != status.OutcomeLost || atts[1].Worker != "w2" {
		for _, a := range atts {
			t.Logf("attempt %d on %s: %s %s", a.Number, a.Worker, a.Outcome, a.Message)
		}
		t.Fatalf("run %s: %s", run.Record.State, run.Record.Message)
	}
}

// msgLog records what a worker does with a work message, in order.
type msgLog struct {
	jetstream.Msg
	mu    sync.Mutex
	calls []string
}

func (m *msgLog) note(s string) {
	m.mu.Lock()
	m.calls = append(m.calls, s)
	m.mu.Unlock()
}
func (m *msgLog) InProgress() error { m.note("progress"); return m.Msg.InProgress() }
func (m *msgLog) Ack() error        { m.note("ack"); return m.Msg.Ack() }
func (m *msgLog) Term() error       { m.note("term"); return m.Msg.Term() }

// The legitimate path: a worker keeps its attempt's work message in
// progress while the attempt runs (three times its ack wait here), and
// acknowledges it once, after reporting; the queue never offers it again.
func TestWorkInProgressThenAcked(t *testing.T) {
	r := startServe(t, sleepy, 30*time.Second)
	m := &msgLog{}
	ackWait := time.Second
	// Its own pools hold nothing: the test hands it the message itself,
	// to see what it does with it.
	w, _ := r.startWorkerWith(t, "w1", Options{AckWait: ackWait, Pools: []string{"elsewhere"},
		Logf: func(f string, args ...any) { m.note("log: " + fmt.Sprintf(f, args...)) }}, nil)
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	done := make(chan *factory.Run, 1)
	go func() {
		run, _ := r.e.Run(ctx, "")
		done <- run
	}()
	cons, err := w.h.JS.CreateOrUpdateConsumer(ctx, cluster.WorkStream, jetstream.ConsumerConfig{Durable: "pool-default",
		FilterSubject: cluster.WorkSubject("default"), AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m.Msg = msg
	w.take(ctx, m)
	run := <-done
	if run == nil || run.Record.State != status.RunSucceeded {
		t.Fatalf("run: %+v", run)
	}
	m.mu.Lock()
	var calls []string
	for _, c := range m.calls {
		if !strings.HasPrefix(c, "log: ") || strings.Contains(c, ": reported") {
			calls = append(calls, c)
		}
	}
	m.mu.Unlock()
	n := len(calls)
	progress := 0
	for _, c := range calls[:max(n-2, 0)] {
		if c != "progress" {
			t.Fatalf("%q while the attempt ran: %v", c, calls)
		}
		progress++
	}
	if n < 2 || !strings.Contains(calls[n-2], "reported") || calls[n-1] != "ack" || progress < 3 {
		t.Fatalf("calls %v: want progress every third of the ack wait, the report, then one ack", calls)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || info.NumAckPending != 0 {
		t.Fatalf("the message was offered again or is still pending: redelivered %d, pending %d", info.NumRedelivered, info.NumAckPending)
	}
}
