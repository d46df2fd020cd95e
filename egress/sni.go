package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	recordTypeHandshake   = 0x16
	handshakeClientHello  = 1
	maxRecordLen          = 16384 + 2048 // TLSCiphertext limit; a ClientHello is plaintext but be lenient
	maxClientHelloLen     = 64 << 10
	extensionServerName   = 0
	serverNameTypeHostame = 0
)

// readClientHello reads TLS records from r until it holds one complete
// ClientHello, which may be split across several records. It returns the
// records exactly as read (to forward them) and the server name the hello
// asks for ("" when it names none).
func readClientHello(r io.Reader) (raw []byte, sni string, err error) {
	var hs []byte
	var hdr [5]byte
	need := -1
	for need < 0 || len(hs) < need {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, "", fmt.Errorf("reading a TLS record: %w", err)
		}
		if hdr[0] != recordTypeHandshake {
			return nil, "", fmt.Errorf("record type %d before the ClientHello was complete", hdr[0])
		}
		if hdr[1] != 3 {
			return nil, "", errors.New("not a TLS record")
		}
		n := int(binary.BigEndian.Uint16(hdr[3:5]))
		if n == 0 || n > maxRecordLen {
			return nil, "", fmt.Errorf("bad TLS record length %d", n)
		}
		rec := make([]byte, 5+n)
		copy(rec, hdr[:])
		if _, err := io.ReadFull(r, rec[5:]); err != nil {
			return nil, "", fmt.Errorf("reading a TLS record: %w", err)
		}
		raw = append(raw, rec...)
		hs = append(hs, rec[5:]...)
		if need < 0 && len(hs) >= 4 {
			if hs[0] != handshakeClientHello {
				return nil, "", fmt.Errorf("handshake message %d is not a ClientHello", hs[0])
			}
			need = 4 + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]))
			if need > maxClientHelloLen {
				return nil, "", errors.New("ClientHello is too large")
			}
		}
	}
	sni, err = parseClientHelloSNI(hs[4:need])
	if err != nil {
		return nil, "", err
	}
	return raw, sni, nil
}

// reader walks a byte slice with bounds checks; any overrun sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

var errBadHello = errors.New("malformed ClientHello")

// parseClientHelloSNI finds the host_name of the server_name extension
// in a ClientHello body.
func parseClientHelloSNI(body []byte) (string, error) {
	r := &reader{b: body}
	r.bytes(2)       // legacy_version
	r.bytes(32)      // random
	r.bytes(r.u8())  // legacy_session_id
	r.bytes(r.u16()) // cipher_suites
	r.bytes(r.u8())  // legacy_compression_methods
	if r.bad {
		return "", errBadHello
	}
	if len(r.b) == 0 {
		return "", nil // no extensions at all
	}
	ext := &reader{b: r.bytes(r.u16())}
	if r.bad {
		return "", errBadHello
	}
	sni, seen := "", false
	for len(ext.b) > 0 {
		typ := ext.u16()
		data := ext.bytes(ext.u16())
		if ext.bad {
			return "", errBadHello
		}
		if typ != extensionServerName {
			continue
		}
		if seen {
			return "", errors.New("two server_name extensions")
		}
		seen = true
		list := &reader{b: data}
		names := &reader{b: list.bytes(list.u16())}
		if list.bad || len(list.b) != 0 {
			return "", errBadHello
		}
		for len(names.b) > 0 {
			nt := names.u8()
			name := names.bytes(names.u16())
			if names.bad {
				return "", errBadHello
			}
			if nt != serverNameTypeHostame {
				continue
			}
			if sni != "" {
				return "", errors.New("two host names in server_name")
			}
			if len(name) == 0 {
				return "", errBadHello
			}
			sni = string(name)
		}
	}
	return sni, nil
}
