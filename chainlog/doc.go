// Package chainlog writes and verifies tamper-evident JSON-lines logs (the
// events.jsonl and egress.log files of runs and attempts).
//
// Format. Every line is one JSON object ending in "\n". A record line is the
// caller's object with a field "prev" added first: the hex SHA-256 of the
// previous line's bytes (without its newline). The first line's prev is
// Genesis, the SHA-256 of the empty string. A seal line is
//
//	{"seal":{"n":N,"hash":H,"final":true,"key":K,"sig":S}}
//
// where N is the number of lines before it, H the hash of the line just
// before it (Genesis when N is 0), K the signing key's id (KeyID), "final"
// present only on the seal Close writes, and S the base64 ed25519 signature
// of SignedMessage(N, H, final). A seal is itself a link of the chain: the
// line after it carries its hash as prev. So every line is bound to every
// line before it, and each seal signs the whole file up to it.
//
// What it proves. An edited, removed, inserted or reordered line breaks the
// chain at the line after it, or the signature of a later seal; a forged
// seal fails its signature. Lines after the last seal are chained but not
// signed: whoever can write the file can rewrite that tail consistently, so
// Verify reports it as unsealed, never as sealed. Seals are written every
// Options.SealEvery lines, every Options.SealInterval, and at Close, so a
// crash leaves at most that much unsealed.
//
// Durability. Each line is written with one write(2) on a file opened with
// O_APPEND, so a killed process leaves whole lines. The file is fsynced at
// every seal (Options.SyncEachLine fsyncs every line), so a power loss loses
// at most the unsealed tail and may leave a torn last line, which Verify
// reports and Open drops before continuing.
package chainlog
