package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kusaw/kusaw/cluster/limits"
)

// Each pool has a claims stream and an object store of its own, plain
// JetStream streams with the pool as a token of every subject, so a
// worker's permissions name its pools' subjects and nothing else
// (workerPerms): a worker that learns another pool's attempt id can
// neither read its claim, bundles, logs or artifacts nor write there.
//
// Every subject of both holds one message and takes no second one
// (MaxMsgsPerSubject 1, DiscardNewPerSubject): a claim or an object, once
// written, is not replaced by anyone, and no stream allows a roll-up, the
// publish header that would empty a subject or the whole stream. Serve
// alone removes what is there: it revokes a claim and frees an attempt's
// objects by purging their subjects, an API no worker's permissions name.
const (
	claimsStreamPre  = "KUSAW_CLAIMS_"  // + pool
	objectsStreamPre = "KUSAW_OBJECTS_" // + pool
	subjClaims       = "kusaw.claims."  // + pool + "." + attempt key
	// subjObjects + pool + "." + writer + ".M." + key.token.<file,
	// base64url>: an object's description; + ".C." + key.token.<id>.<n>:
	// its chunks. The writer is serve's ("s": token 0, the bundles it
	// sends) or the workers' ("w"), so a worker's permissions let it
	// write only where workers write, never one of serve's objects.
	subjObjects = "kusaw.obj."
)

// ClaimsStream and ObjectsStream name a pool's streams.
func ClaimsStream(pool string) string  { return claimsStreamPre + pool }
func ObjectsStream(pool string) string { return objectsStreamPre + pool }

func claimSubject(pool, attemptID string) string { return subjClaims + pool + "." + Key(attemptID) }

// Limits of the per-pool streams (docs/cluster.md, "How much serve's disk
// holds"). A claim is a short JSON value; an object goes up in chunks.
const (
	ClaimsMaxBytes  = limits.ClaimsMaxBytes // per pool: tens of thousands of claims
	ClaimMaxSize    = 1 << 10
	ObjectChunkSize = 256 << 10
	objectMsgMax    = ObjectChunkSize + 4<<10 // a chunk and its headers, or a description
)

// ObjectName names one object of an attempt of pool: the pool, the
// attempt's key, the token of the claim it was stored under (0: serve's)
// and a file name.
func ObjectName(pool, attemptID string, token uint64, name string) string {
	return fmt.Sprintf("%s/%s/%d/%s", pool, Key(attemptID), token, name)
}

// objectRef is an object name taken apart.
type objectRef struct{ pool, key, token, file string }

func parseObject(name string) (objectRef, error) {
	parts := strings.SplitN(name, "/", 4)
	if len(parts) != 4 {
		return objectRef{}, fmt.Errorf("object %q: not <pool>/<attempt>/<token>/<file>", name)
	}
	o := objectRef{parts[0], parts[1], parts[2], parts[3]}
	// One spelling per token: "07" is not "7".
	tok, err := strconv.ParseUint(o.token, 10, 64)
	if err == nil && strconv.FormatUint(tok, 10) != o.token {
		err = strconv.ErrSyntax
	}
	switch {
	case !ValidName(o.pool):
		return objectRef{}, fmt.Errorf("object %q: bad pool", name)
	case !subjectToken(o.key):
		return objectRef{}, fmt.Errorf("object %q: bad attempt", name)
	case err != nil:
		return objectRef{}, fmt.Errorf("object %q: bad token", name)
	case o.file == "" || len(o.file) > 255:
		return objectRef{}, fmt.Errorf("object %q: bad file name", name)
	}
	return o, nil
}

// subjectToken reports whether s can be one token of a subject.
func subjectToken(s string) bool {
	return s != "" && len(s) <= 255 && !strings.ContainsAny(s, ".*> \t\r\n")
}

func (o objectRef) stream() string { return ObjectsStream(o.pool) }

// writer is the subject token of who stores the object.
func (o objectRef) writer() string {
	if o.token == "0" {
		return serveWrites
	}
	return workersWrite
}

const serveWrites, workersWrite = "s", "w"

func (o objectRef) meta() string {
	return subjObjects + o.pool + "." + o.writer() + ".M." + o.key + "." + o.token + "." + base64.RawURLEncoding.EncodeToString([]byte(o.file))
}

func (o objectRef) chunk(id string, n int) string {
	return subjObjects + o.pool + "." + o.writer() + ".C." + o.key + "." + o.token + "." + id + "." + strconv.Itoa(n)
}

// attemptObjects is the filter of every subject of an attempt's objects.
func attemptObjects(pool, attemptID string) string {
	return subjObjects + pool + ".*.*." + Key(attemptID) + ".>"
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
	SHA256 string `json:"sha256"` // hex
	ID     string `json:"id"`     // its chunks' subject token
}

// ErrObjectExists: an object of that name is stored already, and objects
// are never replaced.
var ErrObjectExists = errors.New("an object of that name is stored already")

// ErrNoObject: no object of that name.
var ErrNoObject = errors.New("no such object")

// ObjectStore is the cluster's objects, every pool's, by ObjectName.
// Handles.Objects is one; tests wrap it.
type ObjectStore interface {
	Put(ctx context.Context, name string, r io.Reader) (ObjectInfo, error)
	Get(ctx context.Context, name string) (io.ReadCloser, ObjectInfo, error)
}

// streamObjects stores objects in the pools' object streams.
type streamObjects struct {
	js jetstream.JetStream
	// leader: read from each stream's leader (serve), not whichever
	// replica answers first (direct gets, a worker's).
	leader bool
}

// Put stores r's bytes as name: its chunks first, then its description,
// which only a name not yet stored takes, so no object is ever replaced.
// A full store refuses a chunk (ErrObjectsFull); the chunks already sent
// go when serve frees the attempt's objects.
func (s streamObjects) Put(ctx context.Context, name string, r io.Reader) (ObjectInfo, error) {
	o, err := parseObject(name)
	if err != nil {
		return ObjectInfo{}, err
	}
	id := randomID()
	sum := sha256.New()
	info := ObjectInfo{Name: name, ID: id}
	var pending []jetstream.PubAckFuture
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return storeErr(o, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A refused chunk ends the upload once the ones in flight are settled:
	// none lands after Put returned (and after serve freed the attempt's).
	defer func() {
		for _, f := range pending {
			_ = wait(f)
		}
	}()
	for {
		buf := make([]byte, ObjectChunkSize)
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			sum.Write(buf[:n])
			f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: o.chunk(id, info.Chunks), Data: buf[:n]})
			if err != nil {
				return ObjectInfo{}, storeErr(o, err)
			}
			pending = append(pending, f)
			info.Chunks++
			info.Size += int64(n)
			// A few chunks in flight: fast on a slow link, bounded in memory.
			if len(pending) >= 8 {
				f := pending[0]
				pending = pending[1:]
				if err := wait(f); err != nil {
					return ObjectInfo{}, err
				}
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return ObjectInfo{}, rerr
		}
	}
	for len(pending) > 0 {
		f := pending[0]
		pending = pending[1:]
		if err := wait(f); err != nil {
			return ObjectInfo{}, err
		}
	}
	info.SHA256 = hex.EncodeToString(sum.Sum(nil))
	b, _ := json.Marshal(info)
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: o.meta(), Data: b}, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		return ObjectInfo{}, storeErr(o, err)
	}
	return info, nil
}

// storeErr names what a refused publish to an object stream means.
func storeErr(o objectRef, err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return fmt.Errorf("%w: %s/%s/%s/%s", ErrObjectExists, o.pool, o.key, o.token, o.file)
		case errCodeMaxBytes, errCodeInsufficient:
			return objectsFull(o, api.Description)
		}
	}
	return err
}

// Get reads name: its description, then its chunks (a few at a time); the
// reader fails at its end unless the bytes are those described.
func (s streamObjects) Get(ctx context.Context, name string) (io.ReadCloser, ObjectInfo, error) {
	o, err := parseObject(name)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	b, err := s.read(ctx, o.stream(), o.meta())
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("object %s: %w", name, err)
	}
	var info ObjectInfo
	if json.Unmarshal(b, &info) != nil || info.Name != name || info.Chunks < 0 || !subjectToken(info.ID) {
		return nil, ObjectInfo{}, fmt.Errorf("object %s: a damaged description", name)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		pw.CloseWithError(s.readChunks(ctx, o, info, pw))
	}()
	return readCloser{pr, cancel}, info, nil
}

func (s streamObjects) readChunks(ctx context.Context, o objectRef, info ObjectInfo, w io.Writer) error {
	type got struct {
		b   []byte
		err error
	}
	const window = 8
	var slots []chan got
	next := 0
	fetch := func() {
		c := make(chan got, 1)
		n := next
		next++
		slots = append(slots, c)
		go func() {
			b, err := s.read(ctx, o.stream(), o.chunk(info.ID, n))
			c <- got{b, err}
		}()
	}
	sum := sha256.New()
	var size int64
	for i := 0; i < info.Chunks; i++ {
		for next < info.Chunks && len(slots) < window {
			fetch()
		}
		g := <-slots[0]
		slots = slots[1:]
		if g.err != nil {
			return fmt.Errorf("object %s: chunk %d: %w", info.Name, i, g.err)
		}
		sum.Write(g.b)
		size += int64(len(g.b))
		if _, err := w.Write(g.b); err != nil {
			return err
		}
	}
	if size != info.Size || hex.EncodeToString(sum.Sum(nil)) != info.SHA256 {
		return fmt.Errorf("object %s: its chunks are not the %d bytes described", info.Name, info.Size)
	}
	return nil
}

// LagPatience is how long a worker's read of an object waits for it to
// appear. A worker reads only what serve or itself has stored (a bundle
// the work message or serve's reply names, a chunk its description
// counts), but its direct gets may be answered by any replica: a follower
// answers them from when it is 90% caught up, so with replicas above 1 it
// may say "no such message" for one the leader already acknowledged.
// Another try, which may reach another replica, or the same one a moment
// later, finds it; an object that is truly gone still fails, after this.
var LagPatience = 5 * time.Second

// read is readMsg for an object's message; a worker's (direct gets) tries
// again while the message is not found, up to LagPatience. Serve reads
// from the leader, whose answer is final.
func (s streamObjects) read(ctx context.Context, stream, subject string) ([]byte, error) {
	b, _, err := readMsg(ctx, s.js.Conn(), s.leader, stream, subject)
	if s.leader {
		return b, err
	}
	deadline, wait := time.Now().Add(LagPatience), 10*time.Millisecond
	for errors.Is(err, ErrNoObject) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
		b, _, err = readMsg(ctx, s.js.Conn(), s.leader, stream, subject)
	}
	return b, err
}

type readCloser struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (r readCloser) Close() error { r.cancel(); return r.PipeReader.Close() }

// directGet reads the last message on subject of stream, and its
// sequence, with a direct get naming the subject: the only way a worker's
// permissions let it read a pool's streams.
// readMsg reads subject's last message: from the stream's leader when
// leader, which holds whatever was acknowledged (with replicas a
// follower's direct get may answer from before a claim or an object
// reached it), else by a direct get (what a worker's permissions allow).
func readMsg(ctx context.Context, nc *nats.Conn, leader bool, stream, subject string) ([]byte, uint64, error) {
	if !leader {
		return directGet(ctx, nc, stream, subject)
	}
	req, _ := json.Marshal(map[string]string{"last_by_subj": subject})
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, 0, err
	}
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("a message get answered %q", m.Data)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, ErrNoObject
	case resp.Error != nil:
		return nil, 0, resp.Error
	case resp.Message == nil:
		return nil, 0, errors.New("a message get without a message")
	}
	return resp.Message.Data, resp.Message.Seq, nil
}

func directGet(ctx context.Context, nc *nats.Conn, stream, subject string) ([]byte, uint64, error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return nil, 0, err
	}
	if st := m.Header.Get("Status"); st != "" {
		if st == "404" {
			return nil, 0, ErrNoObject
		}
		if st == "503" { // the stream has no leader (an election): try again
			return nil, 0, nats.ErrNoResponders
		}
		return nil, 0, fmt.Errorf("%s %s", st, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("a direct get without a sequence")
	}
	return m.Data, seq, nil
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PoolOptions size a pool's streams; zero values take the defaults.
type PoolOptions struct {
	Replicas        int
	ClaimsMaxBytes  int64
	ObjectsMaxBytes int64
}

func (o PoolOptions) normal() PoolOptions {
	o.Replicas = max(o.Replicas, 1)
	if o.ClaimsMaxBytes <= 0 {
		o.ClaimsMaxBytes = ClaimsMaxBytes
	}
	if o.ObjectsMaxBytes <= 0 {
		o.ObjectsMaxBytes = ObjectsMaxBytes
	}
	return o
}

// poolStreams are a pool's two stream configurations.
func poolStreams(pool string, o PoolOptions) []jetstream.StreamConfig {
	o = o.normal()
	base := func(name string, subjects []string, maxBytes int64, msg int32, age time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage, Replicas: o.Replicas,
			MaxBytes: maxBytes, MaxMsgSize: msg, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
			MaxAge: age, MaxMsgs: -1, MaxConsumers: -1, AllowDirect: true, DenyDelete: true, AllowRollup: false, Duplicates: 2 * time.Minute}
	}
	return []jetstream.StreamConfig{
		base(ClaimsStream(pool), []string{subjClaims + pool + ".*"}, o.ClaimsMaxBytes, ClaimMaxSize, 0),
		// Only the two shapes objects are made of (meta and chunk): a
		// worker may publish anything under its prefix, and a message of
		// another shape would hide from the sweep, which finds an
		// attempt's key at its place in the subject.
		base(ObjectsStream(pool), []string{subjObjects + pool + ".*.M.*.*.*", subjObjects + pool + ".*.C.*.*.*.*"}, o.ObjectsMaxBytes, objectMsgMax, ObjectsMaxAge),
	}
}

// EnsurePool makes (serve) the pool's streams if they are not there yet.
func (h *Handles) EnsurePool(ctx context.Context, pool string) error {
	if !ValidName(pool) {
		return fmt.Errorf("pool %q: use letters, digits, - and _ (at most 64)", pool)
	}
	h.mu.Lock()
	done := h.pools[pool]
	h.mu.Unlock()
	if done {
		return nil
	}
	for _, cfg := range poolStreams(pool, h.poolOpts) {
		if _, err := createWhenLed(ctx, h.JS, cfg); err != nil {
			return fmt.Errorf("pool %s: stream %s: %v", pool, cfg.Name, err)
		}
	}
	h.mu.Lock()
	h.pools[pool] = true
	h.mu.Unlock()
	return nil
}

// Pools are (serve) every pool whose streams exist.
func (h *Handles) Pools(ctx context.Context) ([]string, error) {
	var out []string
	names := h.JS.StreamNames(ctx, jetstream.WithStreamListSubject(subjClaims+">"))
	for n := range names.Name() {
		if p, ok := strings.CutPrefix(n, claimsStreamPre); ok {
			out = append(out, p)
		}
	}
	return out, names.Err()
}

// ClaimedKeys are (serve) the attempt keys holding a claim in pool.
func (h *Handles) ClaimedKeys(ctx context.Context, pool string) ([]string, error) {
	return h.subjectKeys(ctx, ClaimsStream(pool), subjClaims+pool+".*", 3)
}

// ObjectKeys are (serve) the attempt keys with objects (or chunks of one
// cut short) in pool.
func (h *Handles) ObjectKeys(ctx context.Context, pool string) ([]string, error) {
	return h.subjectKeys(ctx, ObjectsStream(pool), subjObjects+pool+".*.*.*.>", 5)
}

// subjectKeys lists the distinct tokens at index i of stream's subjects
// matching filter.
func (h *Handles) subjectKeys(ctx context.Context, stream, filter string, i int) ([]string, error) {
	st, err := h.JS.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for subj := range info.State.Subjects {
		if t := strings.Split(subj, "."); len(t) > i && !seen[t[i]] {
			seen[t[i]] = true
			out = append(out, t[i])
		}
	}
	return out, nil
}

// purge removes (serve) the messages of stream on subject filter, only
// those before sequence before when it is not 0.
func (h *Handles) purge(ctx context.Context, stream, filter string, before uint64) error {
	st, err := h.JS.Stream(ctx, stream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(filter)}
	if before > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(before))
	}
	return st.Purge(ctx, opts...)
}
