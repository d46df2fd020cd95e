package serve

import (
	"context"
	"time"
)

// retention applies the factory's retention: on its own: when serve starts,
// after each run ends, and every RetentionEvery (an hour) for the runs
// that age meanwhile. Nothing without retention: in the file.
func (s *Server) retention(ctx context.Context) {
	if s.F.Retention == nil {
		return
	}
	every := s.opts.RetentionEvery
	if every <= 0 {
		every = time.Hour
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.applyRetention()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.retain:
		}
	}
}

// kickRetention asks for a pass soon; one pending ask is enough.
func (s *Server) kickRetention() {
	select {
	case s.retain <- struct{}{}:
	default:
	}
}

// applyRetention removes what retention: lets go, a log line for each run
// removed and each one a bound reached that could not go.
func (s *Server) applyRetention() {
	res, err := s.E.State.GC(*s.F.Retention, time.Now(), false)
	if err != nil {
		s.log.Warn().Err(err).Msg("retention: cannot list runs")
		return
	}
	for _, g := range res.Removed {
		s.log.Info().Str("run", g.Run).Str("pipeline", g.Pipeline).Str("why", g.Why).Strs("branches", g.Branches).Msg("retention removed a run")
	}
	for _, g := range res.Kept {
		if g.Error != "" {
			s.log.Warn().Str("run", g.Run).Str("error", g.Error).Msg("retention could not remove a run; it stays")
		}
	}
	trees, err := s.E.State.TrimPools(s.F.Repos, time.Now(), false)
	if err != nil {
		s.log.Warn().Err(err).Msg("retention: cannot trim the worktree pools")
	}
	for _, t := range trees {
		if t.Error != "" {
			s.log.Warn().Str("pool", t.Pool).Str("tree", t.Tree).Str("error", t.Error).Msg("retention could not remove an idle pool tree; it stays")
		} else {
			s.log.Info().Str("pool", t.Pool).Str("tree", t.Tree).Str("why", t.Why).Msg("retention removed an idle pool tree")
		}
	}
}
