package main

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/daemon"
	"github.com/kusaw/kusaw/status"
)

// specFD is a descriptor from which the spec can be read, as kusaw leaves it.
func specFD(t *testing.T, s daemon.Spec) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	w.Write(b)
	w.Close()
	t.Cleanup(func() { r.Close() })
	return strconv.Itoa(int(r.Fd()))
}

// A kusaw of another build than the daemon's is refused before anything
// starts: the two would disagree on the spec and on what serve writes.
func TestOtherBuildRefused(t *testing.T) {
	v, c := buildVersion()
	s := daemon.Spec{Command: "serve", Kusaw: "/opt/kusaw/bin/kusaw", Version: v + "-other", Commit: c,
		Serve: &daemon.Serve{Factory: "/nowhere/factory.yaml"}}
	err := start([]string{"serve", daemon.SpecFlag, specFD(t, s)})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != status.ExitServeUnavailable || !strings.Contains(ee.msg, "install both from one build") || !strings.Contains(ee.msg, "/opt/kusaw/bin/kusaw") {
		t.Fatalf("another build: %v", err)
	}
	// The twin: the same build passes the check and goes on to the
	// factory (missing here: exit 3, the factory's error).
	s.Version = v
	err = start([]string{"serve", daemon.SpecFlag, specFD(t, s)})
	if !errors.As(err, &ee) || ee.code != status.ExitInvalidConfig {
		t.Fatalf("the same build: %v", err)
	}
}

func TestByHandRefused(t *testing.T) {
	for _, args := range [][]string{nil, {"serve"}, {"worker", "--join", "x"}} {
		var ee *exitError
		if err := start(args); !errors.As(err, &ee) || ee.code != status.ExitUsage || !strings.Contains(ee.msg, "kusaw serve --help") {
			t.Errorf("%q: %v", args, err)
		}
	}
}
