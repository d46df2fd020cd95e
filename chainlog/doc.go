// Package chainlog writes and verifies tamper-evident JSON-lines logs (the
// events.jsonl and egress.log files of runs and attempts).
//
// Format (v2). Every line is one JSON object ending in "\n". A record line
// is the caller's object with a field "prev" added first: the hex SHA-256
// of the previous line's bytes (without its newline). A seal line is
//
//	{"seal":{"mark":M,"of":O,"kind":K,"n":N,"hash":H,"prev_seal":P,"key":I,"sig":S}}
//
// where M is "open" (line 1: it names the file's place), "seal" (timer,
// count or a caller's checkpoint), "final" (written by Close) or
// "recovered" (written by Open on a log whose writer died; it adds
// "unsealed", the number of lines after the last seal it found, and
// "dropped_bytes", a torn last line it cut off); O and K the file's
// Binding (run, step and attempt or the run itself, kind); N the number of
// lines before it; H the hash of the line just before it; P the hash of
// the seal before it (Genesis for none); I the key's id; and S the base64
// ed25519 signature of every other field (sealMessage). A seal is itself a
// link of the chain: the line after it carries its hash as prev.
//
// What it proves. An edited, removed, inserted or reordered line breaks the
// chain at the line after it, or a later seal; a forged seal fails its
// signature; a log moved to another place fails its binding. Lines after
// the last seal are chained but not signed: whoever can write the file can
// rewrite that tail consistently, so Verify reports them as unsealed, and
// a recovered marker names them as found unsealed rather than vouching
// for them; Open refuses a log whose sealed part does not verify for its
// place. Seals come within Options.SealInterval (DefaultSealInterval) of a
// line, after Options.SealEvery lines, on Seal and on Close. A log cut back
// to an earlier seal is not visible in the file alone: the caller keeps the
// last seal's SealRef elsewhere (a run's run.json).
//
// Durability. Each line is written with one write(2) on a file opened with
// O_APPEND, so a killed process leaves whole lines. Seals are fsynced at
// most every Options.SyncInterval, the final and recovered ones always, so
// a power loss loses at most the last second and may leave a torn last
// line, which Verify reports and Open cuts off and records in its marker.
package chainlog
