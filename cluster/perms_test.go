package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// violations collects the permission violations the server reports to a
// client, by subject.
type violations struct {
	mu   sync.Mutex
	subj []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if err != nil && strings.Contains(err.Error(), "Permissions Violation") {
		v.mu.Lock()
		v.subj = append(v.subj, err.Error())
		v.mu.Unlock()
	}
}

func (v *violations) saw(subject string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.subj {
		if strings.Contains(s, `"`+subject+`"`) {
			return true
		}
	}
	return false
}

// Attacker's side: an enrolled worker tries every JetStream way of reading
// the events stream, which holds every attempt's events and results:
// creating a consumer (the named and the legacy create, a durable), pulling
// from serve's own consumer, getting a message, a direct get, a snapshot,
// the stream's info. Each is refused by the server and none returns what
// another worker sent. The legitimate twin: the same worker still
// publishes its events and results (serve reads them) and still makes its
// pool's consumer on the work queue.
func TestWorkerCannotReadEvents(t *testing.T) {
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serve, err := s.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	defer serve.Close()
	sjs, _ := jetstream.New(serve)

	// Another worker's event and result, with something worth stealing.
	victim := joined(t, s, "victim")
	vnc, err := Dial(victim, "victim")
	if err != nil {
		t.Fatal(err)
	}
	defer vnc.Close()
	vjs, _ := jetstream.New(vnc)
	const marker = "victim-private-output-7731"
	key := Key("r1/s/1")
	ev, _ := json.Marshal(Event{Attempt: "r1/s/1", Worker: "victim", Token: 1, Type: "output", Data: map[string]any{"line": marker}})
	res, _ := json.Marshal(Result{Attempt: "r1/s/1", Worker: "victim", Token: 1, Error: marker})
	if _, err := vjs.Publish(ctx, EventsSubject(key, "victim"), ev); err != nil {
		t.Fatalf("the victim cannot publish its event: %v", err)
	}
	if _, err := vjs.Publish(ctx, ResultSubject(key, "victim"), res); err != nil {
		t.Fatalf("the victim cannot publish its result: %v", err)
	}
	// Serve's own pull consumer on the stream, which a thief could drain.
	if _, err := sjs.CreateOrUpdateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{Durable: "serve-events", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}

	mallory := joined(t, s, "mallory")
	var v violations
	nc, err := Dial(mallory, "mallory", nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	attacks := []struct{ subject, body string }{
		{"$JS.API.CONSUMER.CREATE." + EventsStream + ".peek", `{"stream_name":"` + EventsStream + `","config":{"name":"peek","deliver_policy":"all","ack_policy":"none"}}`},
		{"$JS.API.CONSUMER.CREATE." + EventsStream + ".peek2.kusaw.result.>", `{"stream_name":"` + EventsStream + `","config":{"name":"peek2","filter_subject":"kusaw.result.>","deliver_policy":"all","ack_policy":"none"}}`},
		{"$JS.API.CONSUMER.CREATE." + EventsStream, `{"stream_name":"` + EventsStream + `","config":{"deliver_policy":"all","ack_policy":"none","deliver_subject":"_INBOX.peek"}}`},
		{"$JS.API.CONSUMER.DURABLE.CREATE." + EventsStream + ".peek3", `{"stream_name":"` + EventsStream + `","config":{"durable_name":"peek3","deliver_policy":"all","ack_policy":"none"}}`},
		{"$JS.API.CONSUMER.MSG.NEXT." + EventsStream + ".serve-events", `{"batch":10,"expires":500000000}`},
		{"$JS.API.CONSUMER.INFO." + EventsStream + ".serve-events", ``},
		{"$JS.API.CONSUMER.DELETE." + EventsStream + ".serve-events", ``},
		{"$JS.API.CONSUMER.LIST." + EventsStream, `{}`},
		{"$JS.API.STREAM.MSG.GET." + EventsStream, `{"seq":1}`},
		{"$JS.API.STREAM.MSG.GET." + EventsStream, `{"last_by_subj":"` + ResultSubject(key, "victim") + `"}`},
		{"$JS.API.DIRECT.GET." + EventsStream, `{"seq":2}`},
		{"$JS.API.DIRECT.GET." + EventsStream + "." + ResultSubject(key, "victim"), ``},
		{"$JS.API.STREAM.SNAPSHOT." + EventsStream, `{"deliver_subject":"_INBOX.snap","chunk_size":1024}`},
		{"$JS.API.STREAM.INFO." + EventsStream, `{"subjects_filter":">"}`},
	}
	var wg sync.WaitGroup
	for _, a := range attacks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := nc.Request(a.subject, []byte(a.body), time.Second)
			if err == nil && (strings.Contains(string(rep.Data), marker) || !strings.Contains(string(rep.Data), `"error"`)) {
				t.Errorf("%s answered: %s", a.subject, rep.Data)
			}
		}()
	}
	wg.Wait()
	_ = nc.Flush()
	time.Sleep(200 * time.Millisecond)
	for _, a := range attacks {
		if !v.saw(a.subject) {
			t.Errorf("%s: the server reported no permissions violation", a.subject)
		}
	}
	// Through the client library too.
	mjs, _ := jetstream.New(nc)
	octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
	if c, err := mjs.OrderedConsumer(octx, EventsStream, jetstream.OrderedConsumerConfig{}); err == nil {
		if msg, err := c.Next(jetstream.FetchMaxWait(time.Second)); err == nil {
			t.Errorf("an ordered consumer read the events stream: %s", msg.Data())
		}
	}
	ocancel()
	// Serve's consumer still has both messages: nothing was drained.
	sc, err := sjs.Consumer(ctx, EventsStream, "serve-events")
	if err != nil {
		t.Fatalf("serve's consumer: %v", err)
	}
	if info, err := sc.Info(ctx); err != nil || info.NumPending != 2 {
		t.Fatalf("serve's consumer after the attacks: %+v %v", info, err)
	}

	// The twin: mallory publishes her own event and result (with the
	// publish acknowledgement a result uses), and makes her work consumer.
	mev, _ := json.Marshal(Event{Attempt: "r1/s/2", Worker: "mallory", Token: 2, Type: "output"})
	if err := nc.Publish(EventsSubject(Key("r1/s/2"), "mallory"), mev); err != nil {
		t.Fatal(err)
	}
	if _, err := mjs.Publish(ctx, ResultSubject(Key("r1/s/2"), "mallory"), mev); err != nil {
		t.Fatalf("a worker cannot publish its result: %v", err)
	}
	if _, err := mjs.CreateOrUpdateConsumer(ctx, WorkStream, jetstream.ConsumerConfig{Durable: "pool-default",
		FilterSubject: WorkSubject("default"), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("a worker cannot make its pool's work consumer: %v", err)
	}
	got := map[string]bool{}
	msgs, err := sc.Fetch(4, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		got[m.Subject()] = true
	}
	for _, subj := range []string{EventsSubject(Key("r1/s/2"), "mallory"), ResultSubject(Key("r1/s/2"), "mallory")} {
		if !got[subj] {
			t.Errorf("serve did not read %s (read %v)", subj, got)
		}
	}
}
