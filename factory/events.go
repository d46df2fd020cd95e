package factory

import (
	"encoding/json"
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

// sink numbers and writes the events of one file and passes each to the
// engine's callback.
type sink struct {
	mu      sync.Mutex
	log     lineLog
	seq     int64
	run     string
	step    string
	attempt int
	emit    func(record.Event)
	err     error
	redact  *redactor
	sealed  chainlog.SealRef // the final seal, once closed
}

func (s *sink) Emit(typ string, data map[string]any) {
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
		}
	}
	emit := s.emit
	s.mu.Unlock()
	if emit != nil {
		emit(ev)
	}
}

func (s *sink) Close() error {
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
