package attempt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/record"
)

// lineLog is an append-only JSON-lines file: a chainlog.Writer, which
// chains each line to the one before and seals (signs) them within its
// seal interval, at once on Seal, and on Close.
type lineLog interface {
	Append(v any) error
	Seal() error
	Close() error
	LastSeal() chainlog.SealRef
}

// Sink numbers and writes the events of one file (a run's or an
// attempt's) and passes each to a callback.
type Sink struct {
	mu      sync.Mutex
	log     lineLog
	seq     int64
	run     string
	step    string
	attempt int
	emit    func(record.Event)
	err     error
	redact  *Redactor
	sealed  chainlog.SealRef // the final seal, once closed
	// onErr hears of the first write or seal that failed, at once (an
	// attempt ends on it rather than go on without its record).
	onErr func(error)
}

// Emit numbers, writes and passes on one event.
func (s *Sink) Emit(typ string, data map[string]any) {
	var failed error
	s.mu.Lock()
	s.seq++
	ev := record.Event{Seq: s.seq, TS: time.Now().UTC(), Run: s.run, Step: s.step, Attempt: s.attempt, Type: typ, Data: data}
	if s.redact != nil && data != nil {
		ev.Data = redactData(data, s.redact.String)
	}
	if s.log != nil {
		// The marshalled line is redacted too: data may hold values that
		// are not plain strings.
		b, err := json.Marshal(ev)
		if err == nil {
			err = s.log.Append(json.RawMessage(s.redact.Bytes(b)))
		}
		if err == nil && record.Checkpoint(typ) {
			err = s.log.Seal()
		}
		if err != nil && s.err == nil {
			s.err = err
			failed = err
		}
	}
	emit, onErr := s.emit, s.onErr
	s.mu.Unlock()
	if failed != nil && onErr != nil {
		onErr(failed)
	}
	if emit != nil {
		emit(ev)
	}
}

// Err is the first write or seal that failed (or the open), if any.
func (s *Sink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Sealed is the file's final seal, once closed.
func (s *Sink) Sealed() chainlog.SealRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sealed
}

// Close seals and closes the file; the error is the first write or seal
// that failed.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return s.err
	}
	err := s.log.Close()
	if err == nil {
		s.sealed = s.log.LastSeal()
	}
	s.log = nil
	if s.err != nil {
		return s.err
	}
	return err
}

// LogOptions are the options of a run's or an attempt's chained log.
func LogOptions(run, step string, attempt int, kind string) chainlog.Options {
	return chainlog.Options{Binding: chainlog.Binding{Run: run, Step: step, Attempt: attempt, Kind: kind}, Perm: record.FileMode()}
}

// OpenSink opens an events file (chainlog.Open: a resumed run continues
// its run-level file) signed with key; emit hears of each event.
func OpenSink(path string, key ed25519.PrivateKey, o chainlog.Options, emit func(record.Event), red *Redactor) *Sink {
	run, step, attempt := o.Binding.Run, o.Binding.Step, o.Binding.Attempt
	s := &Sink{run: run, step: step, attempt: attempt, emit: emit, redact: red}
	w, err := chainlog.Open(path, key, o)
	if err != nil {
		s.err = err
		return s
	}
	s.log = w
	return s
}

// ContinueSink opens an events file to go on writing it: a new chained
// log, or the one there continued, its events numbered after the last (a
// resumed run's, a re-attached attempt's).
func ContinueSink(path string, key ed25519.PrivateKey, o chainlog.Options, emit func(record.Event), red *Redactor) *Sink {
	if _, err := os.Stat(path); err != nil {
		return OpenSink(path, key, o, emit, red)
	}
	s := &Sink{run: o.Binding.Run, step: o.Binding.Step, attempt: o.Binding.Attempt, emit: emit, redact: red}
	if b, err := os.ReadFile(path); err == nil {
		for _, line := range bytes.Split(b, []byte{'\n'}) {
			var ev record.Event
			if json.Unmarshal(line, &ev) == nil && ev.Type != "" && ev.Seq > s.seq {
				s.seq = ev.Seq
			}
		}
	}
	w, err := chainlog.Open(path, key, o)
	if err != nil {
		s.err = err
		return s
	}
	s.log = w
	return s
}

// openSink opens the attempt's events; a volatile attempt's are sealed as
// any, but fsynced only when closed.
func (a *Attempt) openSink() *Sink {
	o := LogOptions(a.spec.Run, a.step.ID, a.n, chainlog.KindEvents)
	if a.job.Volatile {
		o.DeferOpenSync, o.SyncInterval = true, time.Hour
	}
	path := filepath.Join(a.dir, record.EventsFile)
	s := OpenSink(path, a.h.Key, o, a.h.OnEvent, a.redact)
	s.onErr = func(err error) { a.writeFailed(path, err) }
	if err := s.Err(); err != nil {
		a.writeFailed(path, err)
	}
	return s
}

// redactData replaces secret values in every string of an event's data.
func redactData(d map[string]any, r func(string) string) map[string]any {
	out := make(map[string]any, len(d))
	for k, v := range d {
		out[k] = redactValue(v, r)
	}
	return out
}

func redactValue(v any, r func(string) string) any {
	switch x := v.(type) {
	case string:
		return r(x)
	case []string:
		o := make([]string, len(x))
		for i, s := range x {
			o[i] = r(s)
		}
		return o
	case map[string]any:
		return redactData(x, r)
	case []any:
		o := make([]any, len(x))
		for i, e := range x {
			o[i] = redactValue(e, r)
		}
		return o
	case json.RawMessage:
		return json.RawMessage(r(string(x)))
	default:
		return v
	}
}
