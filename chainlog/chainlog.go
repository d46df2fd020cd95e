package chainlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Genesis is the prev of a log's first line: the SHA-256 of nothing.
const Genesis = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// MaxLineBytes bounds one line, for the writer and the verifier alike.
const MaxLineBytes = 16 << 20

// Kinds of log: what a Binding's Kind holds.
const (
	KindEvents = "events"
	KindEgress = "egress"
)

// Binding names the file a log is. Every signature covers it, so a line or
// a whole log signed for one place does not verify in another.
type Binding struct {
	Run     string
	Step    string // "" for the run's own events
	Attempt int    // 0 for the run's own events
	Kind    string // KindEvents or KindEgress
}

// Of is the binding without its kind: "RUN/STEP/N", or "RUN" for the run's
// own events.
func (b Binding) Of() string {
	if b.Step == "" {
		return b.Run
	}
	return b.Run + "/" + b.Step + "/" + strconv.Itoa(b.Attempt)
}

// String is how messages name a binding.
func (b Binding) String() string {
	if b.Step == "" {
		return b.Kind + " of run " + b.Run
	}
	return fmt.Sprintf("%s of run %s, step %s, attempt %d", b.Kind, b.Run, b.Step, b.Attempt)
}

// ParseOf reads a binding's "RUN" or "RUN/STEP/N" form (the kind is
// separate).
func ParseOf(of, kind string) (Binding, error) {
	b := Binding{Kind: kind}
	parts := bytes.Split([]byte(of), []byte("/"))
	switch len(parts) {
	case 1:
		b.Run = of
	case 3:
		n, err := strconv.Atoi(string(parts[2]))
		if err != nil || n < 1 {
			return Binding{}, fmt.Errorf("%q: the attempt must be a number from 1", of)
		}
		b.Run, b.Step, b.Attempt = string(parts[0]), string(parts[1]), n
	default:
		return Binding{}, fmt.Errorf("%q is neither RUN nor RUN/STEP/N", of)
	}
	if b.Run == "" || len(parts) == 3 && b.Step == "" {
		return Binding{}, fmt.Errorf("%q has an empty part", of)
	}
	return b, nil
}

// DefaultSealInterval is the longest a line kusaw wrote waits for the seal
// that signs it (docs/records.md).
const DefaultSealInterval = 100 * time.Millisecond

// Options tune when seals are written and how often the file is fsynced.
type Options struct {
	// Binding is the file's place; required.
	Binding Binding
	// SealEvery writes a seal after this many unsealed lines; 0 means
	// 100, a negative value turns count-based seals off.
	SealEvery int
	// SealInterval writes a seal when a line has waited this long
	// unsealed; 0 means DefaultSealInterval, a negative value turns the
	// timer off (tests).
	SealInterval time.Duration
	// SyncInterval fsyncs sealed lines at most this often; 0 means 1s. The
	// final and recovered seals are always fsynced.
	SyncInterval time.Duration
	// Perm is the mode of a created file; 0 means 0600.
	Perm os.FileMode
	// DeferOpenSync leaves the fsync of Create's opening seal (and of the
	// folder) to the log's next sync: the first seal after a line, or the
	// final seal. For a log made on a process's start path (egress.log),
	// where an fsync can cost milliseconds; a crash before then leaves no
	// line unsealed, only a log without its opening seal, which Open
	// completes.
	DeferOpenSync bool
}

func (o Options) withDefaults() (Options, error) {
	if o.SealEvery == 0 {
		o.SealEvery = 100
	}
	if o.SealInterval == 0 {
		o.SealInterval = DefaultSealInterval
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = time.Second
	}
	if o.Perm == 0 {
		o.Perm = 0o600
	}
	b := o.Binding
	if b.Run == "" || (b.Kind != KindEvents && b.Kind != KindEgress) || (b.Step == "") != (b.Attempt == 0) {
		return o, fmt.Errorf("chainlog: incomplete binding %+v (run, kind, and step with attempt or neither)", b)
	}
	return o, nil
}

// Writer appends records to a chained log. It is safe for concurrent use.
type Writer struct {
	mu           sync.Mutex
	f            *os.File
	path         string
	key          ed25519.PrivateKey
	keyID        string
	opts         Options
	prev         string // hex hash of the last line
	prevSeal     string // hex hash of the last seal line
	lastSealLine int
	lines        int
	unsealed     int // lines since the last seal
	lastSync     time.Time
	dirPending   bool  // the folder's fsync waits for the next sync (DeferOpenSync)
	err          error // sticky: after a failed write the file's end is unknown
	closed       bool
	resumed      Resume
	timer        *time.Timer // seals what waits; armed by the first unsealed line
}

// Resume describes the file Open continued.
type Resume struct {
	Lines int // intact lines found
	// Unsealed is how many of them came after the last seal: chained but
	// signed by no one, so the recovered marker names them unvouched.
	Unsealed int
	// Interrupted is true when the file did not end with a final seal:
	// its writer died, and Open wrote a recovered marker.
	Interrupted bool
	// DroppedBytes is the size of a torn last line (no newline) that Open
	// cut off before continuing: the writer before died mid-line.
	DroppedBytes int
}

// SealRef names one seal line: its 1-based line number and its hash. A run
// record keeps its events' last one, so a log cut back to an earlier seal
// is caught.
type SealRef struct {
	Line int    `json:"line"`
	Hash string `json:"hash"`
}

// Create starts a new log at path with its opening seal; it fails if the
// file exists.
func Create(path string, key ed25519.PrivateKey, opts Options) (*Writer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("chainlog: invalid ed25519 private key")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, opts.Perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("chainlog: %s already exists (use Open to continue it)", path)
		}
		return nil, fmt.Errorf("chainlog: %w", err)
	}
	w := newWriter(f, path, key, opts)
	if opts.DeferOpenSync {
		w.dirPending = true
	} else {
		syncDir(filepath.Dir(path))
	}
	if err := w.sealLocked(markOpen, 0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Open continues the log at path after a restart (creating it if it does
// not exist). The existing lines must verify with key and opts.Binding:
// Open refuses a log whose chain or seals are broken. A log that does not
// end with a final seal was left by a writer that died: Open cuts a torn
// last line and writes a signed recovered marker before anything else. The
// marker names the lines it found after the last seal as unsealed: it
// never vouches for them (they may have been rewritten after the crash),
// and verify --strict names them.
func Open(path string, key ed25519.PrivateKey, opts Options) (*Writer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("chainlog: invalid ed25519 private key")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Create(path, key, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("chainlog: %w", err)
	}
	v := newVerifier(key.Public().(ed25519.PublicKey), opts.Binding)
	res, verr := v.run(f)
	var be *BreakError
	dropped := 0
	if verr != nil {
		if !errors.As(verr, &be) || !be.Torn {
			f.Close()
			return nil, fmt.Errorf("chainlog: %s cannot be continued: %w", path, verr)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("chainlog: %w", err)
		}
		dropped = int(st.Size() - v.goodEnd)
		if err := f.Truncate(v.goodEnd); err != nil {
			f.Close()
			return nil, fmt.Errorf("chainlog: cut torn last line of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("chainlog: %w", err)
		}
	}
	w := newWriter(f, path, key, opts)
	w.prev = v.prev
	w.prevSeal = v.prevSeal
	w.lines = res.Lines
	w.resumed = Resume{Lines: res.Lines, Unsealed: res.Unsealed(), DroppedBytes: dropped}
	switch {
	case res.Lines == 0:
		// The writer died before its opening seal reached the file.
		err = w.sealLocked(markOpen, 0, 0)
	case !res.Final:
		w.resumed.Interrupted = true
		w.unsealed = res.Unsealed()
		err = w.sealLocked(markRecovered, res.Unsealed(), dropped)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

func newWriter(f *os.File, path string, key ed25519.PrivateKey, opts Options) *Writer {
	return &Writer{f: f, path: path, key: key, keyID: KeyID(key.Public().(ed25519.PublicKey)), opts: opts, prev: Genesis, prevSeal: Genesis}
}

// armTimer starts the seal timer when a first line waits unsealed: an idle
// log costs no wake-ups.
func (w *Writer) armTimer() {
	if w.opts.SealInterval < 0 || w.unsealed != 1 {
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(w.opts.SealInterval, w.timedSeal)
		return
	}
	w.timer.Reset(w.opts.SealInterval)
}

func (w *Writer) timedSeal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed && w.err == nil && w.unsealed > 0 {
		_ = w.sealLocked(markSeal, 0, 0)
	}
}

// Resumed reports what Open found; zero for a created log.
func (w *Writer) Resumed() Resume { return w.resumed }

// Path is the log's file.
func (w *Writer) Path() string { return w.path }

// LastSeal names the last seal written (after Close: the final seal).
func (w *Writer) LastSeal() SealRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	return SealRef{Line: w.lastSealLine, Hash: w.prevSeal}
}

// Append writes record (a struct or map that marshals to a JSON object) as
// one line with "prev" added first. The keys "prev" and "seal" are
// reserved. The line is signed by the next seal: within SealInterval, or
// at once with Seal.
func (w *Writer) Append(record any) error {
	body, err := json.Marshal(record)
	if err != nil {
		return fmt.Errorf("chainlog: record: %w", err)
	}
	if bytes.ContainsAny(body, "\r\n") {
		var c bytes.Buffer
		if err := json.Compact(&c, body); err != nil {
			return fmt.Errorf("chainlog: record: %w", err)
		}
		body = c.Bytes()
	}
	if err := checkRecord(body); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	line := make([]byte, 0, len(body)+80)
	line = append(line, `{"prev":"`...)
	line = append(line, w.prev...)
	line = append(line, '"')
	if len(body) > 2 {
		line = append(line, ',')
		line = append(line, body[1:]...)
	} else {
		line = append(line, '}')
	}
	if len(line)+1 > MaxLineBytes {
		return fmt.Errorf("chainlog: record of %d bytes is larger than the %d-byte line limit", len(line), MaxLineBytes)
	}
	if err := w.writeLine(line); err != nil {
		return err
	}
	w.unsealed++
	w.armTimer()
	if w.opts.SealEvery > 0 && w.unsealed >= w.opts.SealEvery {
		return w.sealLocked(markSeal, 0, 0)
	}
	return nil
}

// Seal signs every line written so far at once (a no-op when none waits):
// a checkpoint, for lines that must not wait for the timer (a state
// change).
func (w *Writer) Seal() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	if w.unsealed == 0 {
		return nil
	}
	return w.sealLocked(markSeal, 0, 0)
}

func (w *Writer) syncLocked() error {
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("chainlog: sync %s: %w", w.path, err)
		return w.err
	}
	if w.dirPending {
		syncDir(filepath.Dir(w.path))
		w.dirPending = false
	}
	w.lastSync = time.Now()
	return nil
}

// checkRecord makes sure the record is a JSON object that does not use the
// reserved keys.
func checkRecord(body []byte) error {
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
		return errors.New("chainlog: a record must marshal to a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("chainlog: record: %w", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("chainlog: record: %w", err)
		}
		if k, _ := tok.(string); k == "prev" || k == "seal" {
			return fmt.Errorf("chainlog: a record must not have a top-level %q field (kusaw adds it)", k)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("chainlog: record: %w", err)
		}
	}
	return nil
}

func (w *Writer) usable() error {
	if w.closed {
		return fmt.Errorf("chainlog: %s is closed", w.path)
	}
	return w.err
}

// writeLine writes one whole line with a single write and advances the
// chain. A failed or short write poisons the writer.
func (w *Writer) writeLine(line []byte) error {
	buf := append(line, '\n')
	n, err := w.f.Write(buf)
	if err == nil && n != len(buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("chainlog: write %s: %w", w.path, err)
		return w.err
	}
	sum := sha256.Sum256(buf[:len(buf)-1])
	w.prev = hex.EncodeToString(sum[:])
	w.lines++
	return nil
}

// Close writes the final seal, fsyncs and closes the file. Calling it again
// is a no-op.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	var err error
	if w.err == nil {
		err = w.sealLocked(markFinal, 0, 0)
	} else {
		err = w.err
	}
	w.closed = true
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("chainlog: close %s: %w", w.path, cerr)
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	return err
}

// Marks of a seal line.
const (
	markOpen      = "open"      // line 1: what the file is
	markSeal      = "seal"      // signs the lines since the seal before (timer, count, checkpoint)
	markFinal     = "final"     // written by Close
	markRecovered = "recovered" // written by Open on a log whose writer died
)

type seal struct {
	Mark     string `json:"mark"`
	Of       string `json:"of"`
	Kind     string `json:"kind"`
	N        int    `json:"n"`
	Hash     string `json:"hash"`
	PrevSeal string `json:"prev_seal"`
	// Unsealed and DroppedBytes (recovered marks only) say what recovery
	// found that no signature covers: a torn last line it cut off.
	Unsealed     *int   `json:"unsealed,omitempty"`
	DroppedBytes int    `json:"dropped_bytes,omitempty"`
	Key          string `json:"key"`
	Sig          string `json:"sig"`
}

type sealLine struct {
	Seal seal `json:"seal"`
}

func (w *Writer) sealLocked(mark string, unsealed, dropped int) error {
	b := w.opts.Binding
	s := seal{Mark: mark, Of: b.Of(), Kind: b.Kind, N: w.lines, Hash: w.prev, PrevSeal: w.prevSeal, Key: w.keyID}
	if mark == markRecovered {
		s.Unsealed, s.DroppedBytes = &unsealed, dropped
	}
	s.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(w.key, sealMessage(&s)))
	line, err := json.Marshal(sealLine{s})
	if err != nil {
		return fmt.Errorf("chainlog: %w", err)
	}
	if err := w.writeLine(line); err != nil {
		return err
	}
	w.prevSeal = w.prev
	w.lastSealLine = w.lines
	w.unsealed = 0
	// The closing and recovery seals always reach the disk; the others
	// at most every SyncInterval (an fsync costs milliseconds on a VM).
	if mark == markSeal && time.Since(w.lastSync) < w.opts.SyncInterval {
		return nil
	}
	if mark == markOpen && w.opts.DeferOpenSync {
		return nil // lastSync stays zero: the next seal syncs
	}
	return w.syncLocked()
}

// domain tags the signatures of this format, so the key's signatures cannot
// be replayed as anything else.
const domain = "kusaw-chainlog-v2\x00"

// sealMessage is what a seal's signature covers: every field but the
// signature.
func sealMessage(s *seal) []byte {
	unsealed := "-"
	if s.Unsealed != nil {
		unsealed = strconv.Itoa(*s.Unsealed)
	}
	return []byte(domain + "seal\x00" + s.Key + "\x00" + s.Of + "\x00" + s.Kind + "\x00" + s.Mark + "\x00" +
		strconv.Itoa(s.N) + "\x00" + s.Hash + "\x00" + s.PrevSeal + "\x00" + unsealed + "\x00" + strconv.Itoa(s.DroppedBytes))
}

// KeyID names a public key in seals: "ed25519:" and the first 16 hex digits
// of the SHA-256 of the key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// syncDir makes a new file's directory entry durable; failure only weakens
// durability, so it is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
