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

// Options tune when seals are written and how often the file is fsynced.
type Options struct {
	// SealEvery writes a seal after this many lines; 0 means 100, a
	// negative value turns count-based seals off.
	SealEvery int
	// SealInterval writes a seal when lines have waited this long
	// unsealed; 0 means 2s, a negative value turns the timer off.
	SealInterval time.Duration
	// SyncEachLine fsyncs after every line instead of at every seal.
	SyncEachLine bool
	// Perm is the mode of a created file; 0 means 0600.
	Perm os.FileMode
}

func (o Options) withDefaults() Options {
	if o.SealEvery == 0 {
		o.SealEvery = 100
	}
	if o.SealInterval == 0 {
		o.SealInterval = 2 * time.Second
	}
	if o.Perm == 0 {
		o.Perm = 0o600
	}
	return o
}

// Writer appends records to a chained log. It is safe for concurrent use.
type Writer struct {
	mu       sync.Mutex
	f        *os.File
	path     string
	key      ed25519.PrivateKey
	keyID    string
	opts     Options
	prev     string // hex hash of the last line
	lines    int
	unsealed int // lines since the last seal
	lastSeal bool
	err      error // sticky: after a failed write the file's end is unknown
	closed   bool
	resumed  Resume
	stop     chan struct{}
	done     chan struct{}
}

// Resume describes the file Open continued.
type Resume struct {
	Lines  int // intact lines found
	Sealed int // of which covered by the last seal
	// DroppedBytes is the size of a torn last line (no newline) that Open
	// cut off before continuing; non-zero means the writer before died
	// mid-line (a power loss), and the caller should record that.
	DroppedBytes int
}

// Create starts a new log at path; it fails if the file exists.
func Create(path string, key ed25519.PrivateKey, opts Options) (*Writer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("chainlog: invalid ed25519 private key")
	}
	opts = opts.withDefaults()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, opts.Perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("chainlog: %s already exists (use Open to continue it)", path)
		}
		return nil, fmt.Errorf("chainlog: %w", err)
	}
	syncDir(filepath.Dir(path))
	w := newWriter(f, path, key, opts)
	w.prev = Genesis
	w.start()
	return w, nil
}

// Open continues the log at path after a restart (creating it if it does
// not exist). The existing lines must verify with key's public key: Open
// refuses to extend a log whose chain or seals are broken, since its next
// seal would vouch for the tampered lines. A torn last line is cut off and
// reported in Resumed.
func Open(path string, key ed25519.PrivateKey, opts Options) (*Writer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("chainlog: invalid ed25519 private key")
	}
	opts = opts.withDefaults()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Create(path, key, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("chainlog: %w", err)
	}
	v := newVerifier(key.Public().(ed25519.PublicKey))
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
	w.lines = res.Lines
	w.unsealed = res.Lines - res.Sealed
	w.lastSeal = v.lastSeal
	w.resumed = Resume{Lines: res.Lines, Sealed: res.Sealed, DroppedBytes: dropped}
	w.start()
	return w, nil
}

func newWriter(f *os.File, path string, key ed25519.PrivateKey, opts Options) *Writer {
	return &Writer{f: f, path: path, key: key, keyID: KeyID(key.Public().(ed25519.PublicKey)), opts: opts}
}

func (w *Writer) start() {
	if w.opts.SealInterval < 0 {
		return
	}
	w.stop = make(chan struct{})
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.opts.SealInterval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				w.mu.Lock()
				if !w.closed && w.err == nil && w.unsealed > 0 {
					_ = w.sealLocked(false)
				}
				w.mu.Unlock()
			}
		}
	}()
}

// Resumed reports what Open found; zero for a created log.
func (w *Writer) Resumed() Resume { return w.resumed }

// Path is the log's file.
func (w *Writer) Path() string { return w.path }

// Append writes record (a struct or map that marshals to a JSON object) as
// one line with "prev" added. The keys "prev" and "seal" are reserved.
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
	w.lastSeal = false
	w.unsealed++
	if w.opts.SyncEachLine {
		if err := w.f.Sync(); err != nil {
			w.err = fmt.Errorf("chainlog: sync %s: %w", w.path, err)
			return w.err
		}
	}
	if w.opts.SealEvery > 0 && w.unsealed >= w.opts.SealEvery {
		return w.sealLocked(false)
	}
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

// Seal signs everything written so far (a no-op when the last line is a
// seal) and fsyncs the file.
func (w *Writer) Seal() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	if w.lastSeal {
		return nil
	}
	return w.sealLocked(false)
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
		err = w.sealLocked(true)
	} else {
		err = w.err
	}
	w.closed = true
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("chainlog: close %s: %w", w.path, cerr)
	}
	w.mu.Unlock()
	if w.stop != nil {
		close(w.stop)
		<-w.done
	}
	return err
}

type seal struct {
	N     int    `json:"n"`
	Hash  string `json:"hash"`
	Final bool   `json:"final,omitempty"`
	Key   string `json:"key"`
	Sig   string `json:"sig"`
}

type sealLine struct {
	Seal seal `json:"seal"`
}

func (w *Writer) sealLocked(final bool) error {
	s := seal{N: w.lines, Hash: w.prev, Final: final, Key: w.keyID}
	s.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(w.key, SignedMessage(s.N, s.Hash, final)))
	line, err := json.Marshal(sealLine{s})
	if err != nil {
		return fmt.Errorf("chainlog: %w", err)
	}
	if err := w.writeLine(line); err != nil {
		return err
	}
	w.unsealed = 0
	w.lastSeal = true
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("chainlog: sync %s: %w", w.path, err)
		return w.err
	}
	return nil
}

// SignedMessage is what a seal's signature covers: a domain tag (so the
// key's signatures cannot be replayed as anything else), the line count, the
// hash of the line before the seal, and whether it is the final seal.
func SignedMessage(n int, hash string, final bool) []byte {
	kind := "open"
	if final {
		kind = "final"
	}
	return []byte("kusaw-chainlog-v1\x00" + strconv.Itoa(n) + "\x00" + hash + "\x00" + kind)
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
