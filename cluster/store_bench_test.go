package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkObjectStore stores and reads back one object through kusaw's
// per-pool store (chunks and a description, read by direct gets) and,
// as the baseline in the same run, through nats.go's object store (which
// kusaw no longer uses: it needs roll-ups), both on the embedded server
// through serve's own connection. ratio is kusaw's time over the
// baseline's.
func BenchmarkObjectStore(b *testing.B) {
	s := startTestServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	serve, _ := s.ConnectInProcess("serve")
	defer serve.Close()
	sjs, _ := jetstream.New(serve)
	base, err := sjs.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "BASELINE", Storage: jetstream.FileStorage, MaxBytes: 4 << 30})
	if err != nil {
		b.Fatal(err)
	}
	sh, err := Open(ctx, serve)
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		data := make([]byte, size)
		rand.Read(data)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var kusaw, nats time.Duration
			for i := range b.N {
				name := ObjectName("default", fmt.Sprintf("r/s/%d", i), 1, "artifacts.tar")
				t0 := time.Now()
				if _, err := sh.PutBytes(ctx, name, data); err != nil {
					b.Fatal(err)
				}
				got, err := sh.GetBytes(ctx, name)
				if err != nil || !bytes.Equal(got, data) {
					b.Fatalf("kusaw's store: %v", err)
				}
				kusaw += time.Since(t0)
				t0 = time.Now()
				if _, err := base.PutBytes(ctx, name, data); err != nil {
					b.Fatal(err)
				}
				if got, err = base.GetBytes(ctx, name); err != nil || !bytes.Equal(got, data) {
					b.Fatalf("nats.go's store: %v", err)
				}
				nats += time.Since(t0)
				_ = sh.DeleteObjects(ctx, "default", fmt.Sprintf("r/s/%d", i))
				_ = base.Delete(ctx, name)
			}
			b.ReportMetric(float64(kusaw.Microseconds())/float64(b.N)/1000, "ms_kusaw")
			b.ReportMetric(float64(nats.Microseconds())/float64(b.N)/1000, "ms_natsgo")
			b.ReportMetric(float64(kusaw)/float64(nats), "ratio")
		})
	}
}
