package main

import (
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
)

// RunStore is what the CLI reads runs through: *factory.State in-process, *client.Client
// when serve is up.
type RunStore interface {
	Runs() ([]*record.RunRecord, error)
	LoadRun(id string) (*record.RunRecord, error)
	Attempts(r *record.RunRecord) ([]*record.AttemptRecord, error)
	Helpers(r *record.RunRecord) ([]*record.AttemptRecord, error)
	RunDir(id string) string
	AttemptDir(run, step string, n int) string
	RequestCancel(id string) (*record.RunRecord, error)
	DecideGate(id string, d record.GateDecision) (*record.RunRecord, error)
	ReadLog(runID, rel string, offset, max int64) ([]byte, error)
}

var (
	_ RunStore = (*factory.State)(nil)
	_ RunStore = (*client.Client)(nil)
)
