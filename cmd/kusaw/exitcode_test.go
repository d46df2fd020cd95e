package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// Usage errors are known by where they come from (a command's argument
// check, cobra's flag parsing), never by their text: exit 2 and one line
// naming the help.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, `unknown command "nosuch" for "kusaw"`},
		{[]string{"versoin"}, "did you mean version?"},
		{[]string{"cancel"}, "accepts 1 arg(s), received 0 (see 'kusaw cancel --help')"},
		{[]string{"runs", "extra"}, `unknown command "extra" for "kusaw runs" (see 'kusaw runs --help')`},
		{[]string{"run", "a", "b"}, "accepts at most 1 arg(s), received 2"},
		{[]string{"runs", "--nosuch"}, "unknown flag: --nosuch"},
		{[]string{"completion", "bash", "zsh"}, "(see 'kusaw completion bash --help')"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, strings.NewReader(""), &out, &errb)
		msg := errb.String()
		if code != int(status.ExitUsage) || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("kusaw %v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, msg, c.want)
		}
	}
	// The twin: a right invocation is no usage error.
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, strings.NewReader(""), &out, &errb); code != 0 || errb.Len() != 0 {
		t.Errorf("kusaw version: exit %d, stderr %q", code, errb.String())
	}
}

// One function decides: by the error's identity through any wrapping,
// and for a finished run by its records.
func TestExitCode(t *testing.T) {
	refused := &record.AttemptRecord{Outcome: status.OutcomeRefused, Reason: status.ReasonSandboxNoUserNS}
	failed := &record.AttemptRecord{Outcome: status.OutcomeFailed, Reason: status.ReasonStepExitNonzero}
	missing := &record.AttemptRecord{Outcome: status.OutcomeRefused, Reason: status.ReasonSecretMissing}
	three := 3
	ended := func(st status.RunState, atts ...*record.AttemptRecord) error {
		return &runEnded{rec: &record.RunRecord{State: st}, atts: atts}
	}
	for i, c := range []struct {
		err  error
		want status.ExitCode
	}{
		{nil, status.ExitOK},
		{exitf(status.ExitNotFound, "no run x"), status.ExitNotFound},
		{fmt.Errorf("while following: %w", exitf(status.ExitServeUnavailable, "lost serve")), status.ExitServeUnavailable},
		{silentExit(status.ExitVerifyFailed), status.ExitVerifyFailed},
		{errors.New("something broke"), status.ExitRunFailed},
		{context.Canceled, status.ExitRunFailed},
		{ended(status.RunSucceeded), status.ExitOK},
		{ended(status.RunFailed, failed), status.ExitRunFailed},
		{ended(status.RunFailed, failed, refused), status.ExitSandboxUnavailable},
		{ended(status.RunFailed, missing), status.ExitRunFailed},
		{ended(status.RunCanceled, refused), status.ExitInterrupted},
		{ended(status.RunInterrupted), status.ExitInterrupted},
		{&attemptEnded{&record.AttemptRecord{Outcome: status.OutcomeFailed, Processes: []record.ProcessRecord{{Exit: &three}}}}, 3},
		{&attemptEnded{&record.AttemptRecord{Outcome: status.OutcomeRefused}}, status.ExitSandboxUnavailable},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("%d: exitCode(%v) = %d, want %d", i, c.err, got, c.want)
		}
	}
	if m := errMessage(ended(status.RunFailed, failed)) + errMessage(&attemptEnded{failed}); m != "" {
		t.Errorf("a run's end printed again: %q", m)
	}
	if m := errMessage(errors.New("first\nsecond")); m != "first" {
		t.Errorf("message %q: the first line", m)
	}
}

type failingStore struct {
	RunStore
	err error
}

func (s failingStore) LoadRun(string) (*record.RunRecord, error) { return nil, s.err }

// A run id is looked up the same in-process and through serve: missing
// is exit 5, a prefix of several runs a usage error, known by identity.
func TestLoadRunErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want status.ExitCode
	}{
		{fmt.Errorf("%w %q", record.ErrNoRun, "x"), status.ExitNotFound},
		{&client.APIError{Status: 404, APIErrorBody: client.APIErrorBody{Code: "run_not_found", Message: "no such run"}}, status.ExitNotFound},
		{fmt.Errorf("%w %q: it begins a, b", record.ErrAmbiguousRun, "2026"), status.ExitUsage},
		{&client.APIError{Status: 400, APIErrorBody: client.APIErrorBody{Code: "run_ambiguous", Message: "ambiguous run id"}}, status.ExitUsage},
		{errors.New("disk on fire"), status.ExitInternal},
	} {
		_, err := loadRun(failingStore{err: c.err}, "2026")
		if got := exitCode(err); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.err, got, c.want)
		}
	}
}
