package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/daemon"
	"github.com/kusaw/kusaw/serve"
	"github.com/kusaw/kusaw/status"
)

// runServe is kusaw serve after kusaw read its command line, settings and
// factory (cmd/kusaw/serve.go).
func runServe(spec daemon.Spec) error {
	o := spec.Serve
	f, fs, err := config.Load(o.Factory)
	if err != nil {
		return exitf(status.ExitInvalidConfig, "%v", err)
	}
	if errs := fs.Errors(); len(errs) > 0 {
		return exitf(status.ExitInvalidConfig, "%s (the factory changed since kusaw read it: run kusaw validate)", errs[0].String())
	}
	f.StateDir = o.StateDir
	lvl, _ := zerolog.ParseLevel(o.LogLevel)
	var logw io.Writer = os.Stderr
	if o.LogFormat == "text" {
		logw = zerolog.ConsoleWriter{Out: os.Stderr, NoColor: !o.Color}
	}
	log := zerolog.New(logw).Level(lvl).With().Timestamp().Str("component", "serve").Logger()
	opts := serve.ServeOptions{Log: log, MaxParallel: o.MaxParallel, Listen: o.Listen, Token: o.Token, StopGrace: o.Grace}
	opts.Engine.KillGrace = o.KillGrace
	opts.Engine.Kusaw = spec.Kusaw
	s, err := serve.NewServer(f, opts)
	if err != nil {
		return exitf(status.ExitServeUnavailable, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.Serve(ctx); err != nil {
		return exitf(status.ExitServeUnavailable, "%v", err)
	}
	return nil
}
