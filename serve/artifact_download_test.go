package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// A large artifact on a slow link outlasts the listener's write timeout,
// which bounds a whole response: the download must go on while the client
// keeps reading (the timeout bounds each chunk instead). Here the write
// timeout is 1s and the client reads 8 MiB in about 2s.
func TestArtifactDownloadOutlastsTheWriteTimeout(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [make]
steps:
  make:
    run: [sh, -c, "head -c 8388608 /dev/zero > $KUSAW_ARTIFACTS/big.bin"]
`)
	_, c, _ := startServer(t, f, ServeOptions{MaxParallel: 1, Limits: Limits{Write: time.Second}})
	rec, err := c.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := waitRun(t, c, rec.ID, 60*time.Second); d.Run.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", d.Run.State, d.Run.Message)
	}
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://x/v1/runs/" + rec.ID + "/attempts/make/1/artifacts/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != 8<<20 {
		t.Fatalf("download: %d, %d bytes announced", resp.StatusCode, resp.ContentLength)
	}
	var got int64
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		got += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the download broke off after %d of %d bytes: %v", got, 8<<20, err)
		}
		time.Sleep(8 * time.Millisecond)
	}
	if got != 8<<20 {
		t.Fatalf("got %d bytes, want %d", got, 8<<20)
	}
}
