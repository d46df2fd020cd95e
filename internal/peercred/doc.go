// Package peercred tells who is at the other end of a Unix socket kusaw
// serves, so a socket can refuse a peer that a sandbox runs. Every Linux
// sandbox kusaw builds has its own user and PID namespaces (bubblewrap's
// --unshare-user and --unshare-pid), so a peer whose namespaces are not
// kusaw's own is a sandboxed process, or something further away, and
// HostPeer refuses it. The one sandboxed peer kusaw expects, the egress
// bridge handing over its listener, is named by the process kusaw started
// for its sandbox: Descends accepts a peer below that process and nothing
// else.
//
// Every check fails closed: a peer whose credentials or namespaces cannot
// be read is refused. The peer is held by a pidfd (SO_PEERPIDFD, or
// pidfd_open on kernels before 6.5) while its /proc entries are read, and
// it must still be alive afterwards, so a peer that exits and whose pid is
// reused cannot lend its checks to another process.
//
// On macOS there are no namespaces: a peer must run as kusaw's user (or
// root), and the Seatbelt profile, which denies Unix sockets outside the
// attempt, is what keeps a sandboxed step away.
//
// It imports nothing of kusaw.
package peercred
