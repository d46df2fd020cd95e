package serve

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/adhocore/gronx"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
)

// scheduleState is serve/schedules.json: per schedule trigger, the last
// minute it was due, the run it started, and why it last did not start
// one. It survives restarts, so a minute is acted on once.
type scheduleState struct {
	Triggers map[string]*scheduleEntry `json:"triggers"`
}

type scheduleEntry struct {
	Due     time.Time  `json:"due"`           // the last minute the schedule was due
	Run     string     `json:"run,omitempty"` // the run it started then
	Skipped *skipEntry `json:"skipped,omitempty"`
}

type skipEntry struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

const defaultScheduleTick = 15 * time.Second

func (s *Server) scheduleFile() string { return filepath.Join(s.F.StateDir, "serve", "schedules.json") }

// schedules fires the factory's schedule triggers (in UTC) until ctx ends.
// A trigger whose previous run still runs is skipped, with the reason
// recorded in schedules.json and serve's log.
func (s *Server) schedules(ctx context.Context) {
	list := s.F.Schedules()
	if len(list) == 0 {
		return
	}
	st := &scheduleState{Triggers: map[string]*scheduleEntry{}}
	if b, err := os.ReadFile(s.scheduleFile()); err == nil {
		_ = json.Unmarshal(b, st)
		if st.Triggers == nil {
			st.Triggers = map[string]*scheduleEntry{}
		}
	}
	tick := s.opts.ScheduleTick
	if tick <= 0 {
		tick = defaultScheduleTick
	}
	g := gronx.New()
	for {
		now := s.intake.now().UTC().Truncate(time.Minute)
		changed := false
		for _, t := range list {
			e := st.Triggers[t.Name]
			if e == nil {
				e = &scheduleEntry{}
				st.Triggers[t.Name] = e
			}
			if !e.Due.Before(now) {
				continue // this minute was acted on already
			}
			if due, err := g.IsDue(t.On.Schedule, now); err != nil || !due {
				continue
			}
			e.Due, changed = now, true
			s.fireSchedule(t, e, now)
		}
		if changed {
			if b, err := json.MarshalIndent(st, "", "  "); err == nil {
				_ = config.WriteFileAtomic(s.scheduleFile(), b, record.FileMode())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(tick):
		}
	}
}

func (s *Server) fireSchedule(t *config.Trigger, e *scheduleEntry, now time.Time) {
	if e.Run != "" {
		if prev, err := s.E.State.LoadRun(e.Run); err == nil && !prev.State.Final() {
			e.Skipped = &skipEntry{At: now, Reason: "run " + prev.ID + " of the previous time is still " + string(prev.State)}
			s.intake.count("schedule", "skipped")
			s.log.Info().Str("trigger", t.Name).Str("run", prev.ID).Msg("schedule skipped: " + e.Skipped.Reason)
			return
		}
	}
	vals := map[string]string{"trigger": t.Name, "event": "schedule"}
	params := map[string]string{}
	for _, name := range t.ParamOrder {
		params[name] = config.ExpandTemplate(t.Params[name], vals)
	}
	rec, err := s.SubmitRequest(factory.RunRequest{Pipeline: t.Pipeline, Params: params,
		Trigger: &record.Trigger{Name: t.Name, Schedule: t.On.Schedule, Event: "schedule"}})
	if err != nil {
		e.Skipped = &skipEntry{At: now, Reason: "cannot start the run: " + err.Error()}
		s.intake.count("schedule", "failed")
		s.log.Warn().Str("trigger", t.Name).Err(err).Msg("schedule: cannot start the run")
		return
	}
	e.Run, e.Skipped = rec.ID, nil
	s.intake.count("schedule", "run")
	s.log.Info().Str("trigger", t.Name).Str("run", rec.ID).Msg("schedule started a run")
}
