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

// Attacker's side: replies travel on inbox subjects, so whoever may
// subscribe to every inbox reads every reply: the events stream as serve's
// own consumer pulls it, another worker's object and bucket reads. mallory,
// an enrolled worker, and a join token's holder both subscribe to _INBOX.>
// while serve pulls the victim's event and the victim reads an object;
// neither sees any of it. The twin: the victim's requests (a JetStream
// publish, an object read, a request to serve) still get their replies
// under its own inbox.
func TestWorkerCannotReadOthersReplies(t *testing.T) {
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serve, err := s.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	defer serve.Close()
	sjs, _ := jetstream.New(serve)
	sh, err := Open(ctx, serve)
	if err != nil {
		t.Fatal(err)
	}
	const marker = "victim-private-output-4412"
	if _, err := sh.PutBytes(ctx, ObjectName("default", "r1/s/1", 1, "stdout.log"), []byte(marker)); err != nil {
		t.Fatal(err)
	}

	// The snoops listen first.
	var mv violations
	mallory := joined(t, s, "mallory")
	mnc, err := Dial(mallory, "mallory", nats.ErrorHandler(mv.handler))
	if err != nil {
		t.Fatal(err)
	}
	defer mnc.Close()
	var ev violations
	tok, _ := s.NewToken("", Grant{})
	enc, err := nats.Connect(s.URL(), nats.UserInfo(EnrollUser, tok.Secret), nats.Secure(PinnedTLS(tok.CA)), nats.ErrorHandler(ev.handler))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	seen := make(chan string, 64)
	for _, nc := range []*nats.Conn{mnc, enc} {
		_, _ = nc.Subscribe("_INBOX.>", func(m *nats.Msg) { seen <- string(m.Data) })
		_ = nc.Flush()
	}

	victim := joined(t, s, "victim")
	vnc, err := Dial(victim, "victim")
	if err != nil {
		t.Fatal(err)
	}
	defer vnc.Close()
	vjs, _ := jetstream.New(vnc)
	key := Key("r1/s/1")
	evb, _ := json.Marshal(Event{Attempt: "r1/s/1", Worker: "victim", Token: 1, Type: "output", Data: map[string]any{"line": marker}})
	if _, err := vjs.Publish(ctx, EventsSubject(key, "victim"), evb); err != nil {
		t.Fatalf("the victim's publish got no acknowledgement: %v", err)
	}
	vh, err := Open(ctx, vnc)
	if err != nil {
		t.Fatalf("the victim cannot open the buckets: %v", err)
	}
	if b, err := vh.GetBytes(ctx, ObjectName("default", "r1/s/1", 1, "stdout.log")); err != nil || string(b) != marker {
		t.Fatalf("the victim cannot read an object: %q %v", b, err)
	}
	// Serve reads the event the way its dispatcher does: a consumer whose
	// messages come to serve's inbox.
	c, err := sjs.OrderedConsumer(ctx, EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || !strings.Contains(string(m.Data()), marker) {
		t.Fatalf("serve did not read the event: %v", err)
	}
	// A request the victim makes of serve gets its answer.
	sub, _ := serve.Subscribe("kusaw.secrets.>", func(m *nats.Msg) { _ = m.Respond([]byte(marker)) })
	defer sub.Unsubscribe()
	_ = serve.Flush()
	if rep, err := vnc.Request(SecretsSubject(key, "victim"), nil, 5*time.Second); err != nil || string(rep.Data) != marker {
		t.Fatalf("the victim's request got no answer: %v", err)
	}

	time.Sleep(300 * time.Millisecond)
	for {
		select {
		case got := <-seen:
			if strings.Contains(got, marker) {
				t.Fatalf("a snoop on _INBOX.> read another client's reply: %.200s", got)
			}
			continue
		default:
		}
		break
	}
	if !mv.saw("_INBOX.>") {
		t.Error("the server reported no permissions violation for mallory's _INBOX.> subscription")
	}
	if !ev.saw("_INBOX.>") {
		t.Error("the server reported no permissions violation for the token holder's _INBOX.> subscription")
	}
}

// Attacker's side: a worker enrolled for pool default tries every
// JetStream way to take or read pool release's work: making the
// pool-release consumer (the named create with and without the filter in
// the subject, its own consumer's name with release's filter, the legacy
// ephemeral and durable creates), pulling from the pool-release consumer
// serve made, acknowledging its message, getting the message from the
// stream. Each is refused by the server (a permissions violation) and
// the release message stays in its queue. The legitimate twin: a worker
// enrolled for release makes the pool-release consumer and pulls the
// message; the default worker still makes its own.
func TestWorkerTakesOnlyItsPools(t *testing.T) {
	s := startTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serve, err := s.ConnectInProcess("serve")
	if err != nil {
		t.Fatal(err)
	}
	defer serve.Close()
	sjs, _ := jetstream.New(serve)
	const marker = "release-attempt-spec-5521"
	if _, err := sjs.Publish(ctx, WorkSubject("release"), []byte(`{"spec":{"id":"`+marker+`"}}`)); err != nil {
		t.Fatal(err)
	}
	// The release pool's consumer exists already, as once a release
	// worker has started.
	relCons, err := sjs.CreateOrUpdateConsumer(ctx, WorkStream, jetstream.ConsumerConfig{Durable: WorkConsumer("release"),
		FilterSubject: WorkSubject("release"), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}

	mallory := joinedFor(t, s, "mallory", Grant{})
	var v violations
	nc, err := Dial(mallory, "mallory", nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := func(name, filter string) string {
		return `{"stream_name":"` + WorkStream + `","config":{"durable_name":"` + name + `","filter_subject":"` + filter + `","deliver_policy":"all","ack_policy":"explicit"}}`
	}
	rel := WorkSubject("release")
	attacks := []struct{ subject, body string }{
		{"$JS.API.CONSUMER.CREATE." + WorkStream + ".pool-release." + rel, cfg("pool-release", rel)},
		{"$JS.API.CONSUMER.CREATE." + WorkStream + ".pool-release", cfg("pool-release", rel)},
		{"$JS.API.CONSUMER.CREATE." + WorkStream + ".pool-default." + rel, cfg("pool-default", rel)},
		{"$JS.API.CONSUMER.CREATE." + WorkStream + ".pool-default", cfg("pool-default", rel)},
		{"$JS.API.CONSUMER.CREATE." + WorkStream + ".sneak." + rel, cfg("sneak", rel)},
		{"$JS.API.CONSUMER.CREATE." + WorkStream, `{"stream_name":"` + WorkStream + `","config":{"filter_subject":"` + rel + `","ack_policy":"none","deliver_subject":"` + WorkerInbox("mallory") + `.x"}}`},
		{"$JS.API.CONSUMER.DURABLE.CREATE." + WorkStream + ".pool-release", cfg("pool-release", rel)},
		{"$JS.API.CONSUMER.MSG.NEXT." + WorkStream + ".pool-release", `{"batch":1,"expires":500000000}`},
		{"$JS.API.CONSUMER.INFO." + WorkStream + ".pool-release", ``},
		{"$JS.API.CONSUMER.DELETE." + WorkStream + ".pool-release", ``},
		{"$JS.API.STREAM.MSG.GET." + WorkStream, `{"seq":1}`},
		{"$JS.API.DIRECT.GET." + WorkStream, `{"seq":1}`},
		{"$JS.API.STREAM.INFO." + WorkStream, `{"subjects_filter":">"}`},
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
	// Acknowledging (terminating) release's first delivery, in both
	// reply forms.
	for _, subj := range []string{"$JS.ACK." + WorkStream + ".pool-release.1.1.1.0.0", "$JS.ACK._.hash." + WorkStream + ".pool-release.1.1.1.0.0"} {
		_ = nc.Publish(subj, []byte("+TERM"))
	}
	_ = nc.Flush()
	time.Sleep(200 * time.Millisecond)
	for _, a := range attacks {
		if !v.saw(a.subject) {
			t.Errorf("%s: the server reported no permissions violation", a.subject)
		}
	}
	for _, subj := range []string{"$JS.ACK." + WorkStream + ".pool-release.1.1.1.0.0", "$JS.ACK._.hash." + WorkStream + ".pool-release.1.1.1.0.0"} {
		if !v.saw(subj) {
			t.Errorf("%s: the server reported no permissions violation", subj)
		}
	}
	// Through the client library too.
	mjs, _ := jetstream.New(nc)
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := mjs.CreateOrUpdateConsumer(cctx, WorkStream, jetstream.ConsumerConfig{Durable: WorkConsumer("release"),
		FilterSubject: rel, AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
		t.Error("mallory made the pool-release consumer")
	}
	ccancel()
	if info, err := relCons.Info(ctx); err != nil || info.NumPending != 1 || info.NumAckPending != 0 {
		t.Fatalf("release's queue after the attacks: %+v %v", info, err)
	}
	// mallory's own pool still works.
	if _, err := mjs.CreateOrUpdateConsumer(ctx, WorkStream, jetstream.ConsumerConfig{Durable: WorkConsumer("default"),
		FilterSubject: WorkSubject("default"), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("a default worker cannot make its own pool's consumer: %v", err)
	}

	// The twin: a release worker takes the message and acknowledges it.
	relID := joinedFor(t, s, "rel", Grant{Pools: []string{"release"}})
	rnc, err := Dial(relID, "rel")
	if err != nil {
		t.Fatal(err)
	}
	defer rnc.Close()
	rjs, _ := jetstream.New(rnc)
	c, err := rjs.CreateOrUpdateConsumer(ctx, WorkStream, jetstream.ConsumerConfig{Durable: WorkConsumer("release"),
		FilterSubject: rel, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("a release worker cannot make its pool's consumer: %v", err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || !strings.Contains(string(m.Data()), marker) {
		t.Fatalf("the release worker did not get the release message: %v", err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("the release worker cannot acknowledge its message: %v", err)
	}
	// And with a grant of every pool, any pool's consumer.
	anyID := joinedFor(t, s, "any", Grant{AnyPool: true})
	anc, err := Dial(anyID, "any")
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	ajs, _ := jetstream.New(anc)
	if _, err := ajs.CreateOrUpdateConsumer(ctx, WorkStream, jetstream.ConsumerConfig{Durable: WorkConsumer("gpu"),
		FilterSubject: WorkSubject("gpu"), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("an any-pool worker cannot make pool gpu's consumer: %v", err)
	}
}

// Attacker's side: pools are a boundary for data too. mallory, enrolled
// for pool default, knows an attempt of pool release (its id, the token
// of its claim, the names of its objects) and tries every way at its
// claim, serve's bundle and the holder's logs: reading them through the
// client (as her own pool's store), direct gets on release's streams by
// subject and by sequence, through her own pool's stream name, message
// gets, consumers, the stream's info; claiming the attempt and writing an
// object under release's names. Each is refused (a permissions violation)
// and nothing of release's is read or changed. The twin: release's worker
// reads both and claims its next attempt, mallory still uses her own
// pool's, and a worker granted every pool reads release's.
func TestPoolsSeparateData(t *testing.T) {
	s, ctx, sh := serveWithPool(t, "release")
	const marker = "release-private-code-9917"
	const id = "r1/ship/1"
	bundle := ObjectName("release", id, 0, "in-app.bundle")
	if _, err := sh.PutBytes(ctx, bundle, []byte(marker)); err != nil {
		t.Fatal(err)
	}
	_, rh := workerConn(t, s, "rel", Grant{Pools: []string{"release"}})
	tok, err := rh.Claim(ctx, "release", id, "rel")
	if err != nil {
		t.Fatal(err)
	}
	logs := ObjectName("release", id, tok, "stdout.log")
	if _, err := rh.PutBytes(ctx, logs, []byte(marker)); err != nil {
		t.Fatal(err)
	}

	var v violations
	mnc, mh := workerConn(t, s, "mallory", Grant{}, nats.ErrorHandler(v.handler))
	// A refused request is never answered: each waits out its second.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, time.Second)
		t.Cleanup(cancel)
		return c
	}
	for _, name := range []string{bundle, logs} {
		if b, err := mh.GetBytes(short(), name); err == nil || strings.Contains(string(b), marker) {
			t.Errorf("mallory read %s: %q %v", name, b, err)
		}
	}
	if _, _, err := mh.Holder(short(), "release", id); err == nil {
		t.Error("mallory read release's claim")
	}
	if _, err := mh.Claim(short(), "release", "r1/ship/2", "mallory"); err == nil {
		t.Error("mallory claimed an attempt of release")
	}
	if _, err := mh.PutBytes(short(), ObjectName("release", id, tok, "stderr.log"), []byte("pwned")); err == nil {
		t.Error("mallory stored an object in release's store")
	}
	o, _ := parseObject(bundle)
	cs, os := ClaimsStream("release"), ObjectsStream("release")
	attacks := []struct{ subject, body string }{
		{"$JS.API.DIRECT.GET." + os + "." + o.meta(), ``},
		{"$JS.API.DIRECT.GET." + os, `{"seq":1}`},
		{"$JS.API.DIRECT.GET." + os, `{"last_by_subj":"` + o.meta() + `"}`},
		{"$JS.API.DIRECT.GET." + cs + "." + claimSubject("release", id), ``},
		{"$JS.API.DIRECT.GET." + cs, `{"seq":1}`},
		{"$JS.API.DIRECT.GET." + ObjectsStream("default") + "." + o.meta(), ``},
		{"$JS.API.DIRECT.GET." + ClaimsStream("default") + "." + claimSubject("release", id), ``},
		{"$JS.API.STREAM.MSG.GET." + os, `{"seq":1}`},
		{"$JS.API.STREAM.MSG.GET." + cs, `{"last_by_subj":"` + claimSubject("release", id) + `"}`},
		{"$JS.API.STREAM.INFO." + os, `{"subjects_filter":">"}`},
		{"$JS.API.STREAM.INFO." + cs, `{"subjects_filter":">"}`},
		{"$JS.API.CONSUMER.CREATE." + os + ".peek", `{"stream_name":"` + os + `","config":{"name":"peek","deliver_policy":"all","ack_policy":"none"}}`},
		{"$JS.API.CONSUMER.CREATE." + cs, `{"stream_name":"` + cs + `","config":{"deliver_policy":"all","ack_policy":"none","deliver_subject":"` + WorkerInbox("mallory") + `.x"}}`},
		{"$JS.API.STREAM.PURGE." + cs, `{}`},
		// Her own pool's streams, which she may read, but not for anything else.
		{"$JS.API.CONSUMER.CREATE." + ObjectsStream("default") + ".peek", `{"stream_name":"` + ObjectsStream("default") + `","config":{"name":"peek","ack_policy":"none"}}`},
		{"$JS.API.DIRECT.GET." + ObjectsStream("default"), `{"seq":1}`},
	}
	var wg sync.WaitGroup
	for _, a := range attacks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := mnc.Request(a.subject, []byte(a.body), time.Second)
			if err == nil && (strings.Contains(string(rep.Data), marker) || !strings.Contains(string(rep.Data)+rep.Header.Get("Status"), "error")) {
				t.Errorf("%s answered: %s %v", a.subject, rep.Data, rep.Header)
			}
		}()
	}
	wg.Wait()
	for _, subj := range []string{claimSubject("release", "r1/ship/3"), o.chunk("abc", 0), o.meta()} {
		_ = mnc.Publish(subj, []byte(`{"worker":"mallory"}`))
	}
	_ = mnc.Flush()
	time.Sleep(200 * time.Millisecond)
	for _, a := range attacks {
		if !v.saw(a.subject) {
			t.Errorf("%s: the server reported no permissions violation", a.subject)
		}
	}
	for _, subj := range []string{claimSubject("release", "r1/ship/3"), o.meta()} {
		if !v.saw(subj) {
			t.Errorf("publish %s: the server reported no permissions violation", subj)
		}
	}
	if st := streamState(t, sh, cs); st.Msgs != 1 {
		t.Errorf("release's claims hold %d messages, want its one claim", st.Msgs)
	}
	if c, cur, err := sh.Holder(ctx, "release", id); err != nil || cur != tok || c.Worker != "rel" {
		t.Errorf("release's claim after the attacks: %+v %d %v", c, cur, err)
	}

	// The twin.
	for _, name := range []string{bundle, logs} {
		if b, err := rh.GetBytes(ctx, name); err != nil || string(b) != marker {
			t.Errorf("release's worker cannot read %s: %q %v", name, b, err)
		}
	}
	if c, cur, err := rh.Holder(ctx, "release", id); err != nil || cur != tok || c.Worker != "rel" {
		t.Errorf("release's worker cannot read its claim: %+v %d %v", c, cur, err)
	}
	if _, err := rh.Claim(ctx, "release", "r1/ship/2", "rel"); err != nil {
		t.Errorf("release's worker cannot claim: %v", err)
	}
	if _, err := mh.Claim(ctx, "default", "r1/build/1", "mallory"); err != nil {
		t.Errorf("mallory cannot claim in her own pool: %v", err)
	}
	mine := ObjectName("default", "r1/build/1", 1, "stdout.log")
	if _, err := mh.PutBytes(ctx, mine, []byte("hers")); err != nil {
		t.Errorf("mallory cannot store in her own pool: %v", err)
	}
	if b, err := mh.GetBytes(ctx, mine); err != nil || string(b) != "hers" {
		t.Errorf("mallory cannot read her own pool's object: %q %v", b, err)
	}
	_, ah := workerConn(t, s, "any", Grant{AnyPool: true})
	if b, err := ah.GetBytes(ctx, bundle); err != nil || string(b) != marker {
		t.Errorf("an any-pool worker cannot read release's bundle: %q %v", b, err)
	}
	if _, cur, err := ah.Holder(ctx, "release", id); err != nil || cur != tok {
		t.Errorf("an any-pool worker cannot read release's claim: %v", err)
	}
}
