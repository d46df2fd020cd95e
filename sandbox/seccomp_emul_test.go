//go:build linux && (amd64 || arm64)

package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// runFilter runs the assembled filter in x/net/bpf's VM on one
// seccomp_data. The VM loads words big-endian, so each 32-bit field is
// written that way (the filter only loads whole words).
func runFilter(t *testing.T, arch, nr uint32, args ...uint64) uint32 {
	t.Helper()
	prog, err := SeccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(prog)/8)
	for i := range raw {
		b := prog[8*i:]
		raw[i] = bpf.RawInstruction{Op: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	ins, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the filter does not disassemble")
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("the filter is not a valid program: %v", err)
	}
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[20+8*i:], uint32(a>>32))
	}
	r, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(r)
}

// Every call number gets what the tables say: the range merging and the
// binary search lose nothing and add nothing.
func TestSeccompFilterEveryCall(t *testing.T) {
	want := map[uint32]uint32{}
	for _, nr := range append(append([]uintptr{}, allowed...), archAllowed...) {
		want[uint32(nr)] = retAllow
	}
	for _, nr := range append(append([]uintptr{}, refused...), archRefused...) {
		want[uint32(nr)] = retEPERM
	}
	for _, nr := range noSys {
		want[uint32(nr)] = retENOSYS
	}
	cond := conditional()
	for nr := uint32(0); nr < 1024; nr++ {
		if _, ok := cond[uintptr(nr)]; ok {
			continue
		}
		w, ok := want[nr]
		if !ok {
			w = retENOSYS
		}
		if got := runFilter(t, auditArch, nr); got != w {
			t.Errorf("system call %d: %#x, want %#x", nr, got, w)
		}
	}
	// beyond the named calls: ENOSYS up to where archKilled starts
	for _, nr := range []uint32{1024, 0x10000, 0x3fffffff, 0x40000000, 0x40000000 | unix.SYS_READ, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff} {
		w := uint32(retENOSYS)
		for _, r := range archKilled {
			if nr >= r[0] && nr <= r[1] {
				w = retKill
			}
		}
		if got := runFilter(t, auditArch, nr); got != w {
			t.Errorf("system call %#x: %#x, want %#x", nr, got, w)
		}
	}
	// conditional calls, with arguments
	cases := []struct {
		nr   uintptr
		args []uint64
		want uint32
	}{
		{unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_STREAM, 0}, retAllow},
		{unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, retNoFamily},
		{unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, retAllow},
		{unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT}, retNoFamily},
		{unix.SYS_SOCKETPAIR, []uint64{unix.AF_UNIX}, retAllow},
		{unix.SYS_SOCKETPAIR, []uint64{unix.AF_INET}, retNoFamily},
		{unix.SYS_PTRACE, []uint64{unix.PTRACE_TRACEME}, retAllow},
		{unix.SYS_PTRACE, []uint64{unix.PTRACE_ATTACH, 1}, retEPERM},
		{unix.SYS_PTRACE, []uint64{unix.PTRACE_SEIZE, 1}, retEPERM},
		{unix.SYS_PTRACE, []uint64{1<<32 | unix.PTRACE_CONT}, retEPERM},
		{unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, retAllow},
		{unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, retEPERM},
		{unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWTIME}, retEPERM},
		{unix.SYS_UNSHARE, []uint64{unix.CLONE_FILES}, retAllow},
		{unix.SYS_PERSONALITY, []uint64{0xffffffff}, retAllow},
		{unix.SYS_PERSONALITY, []uint64{0x0400000}, retEPERM},
		{unix.SYS_KEYCTL, []uint64{unix.KEYCTL_JOIN_SESSION_KEYRING, 0}, retAllow},
		{unix.SYS_KEYCTL, []uint64{unix.KEYCTL_JOIN_SESSION_KEYRING, 1 << 40}, retEPERM},
		{unix.SYS_KEYCTL, []uint64{unix.KEYCTL_READ, 5}, retEPERM},
	}
	for _, c := range cases {
		if got := runFilter(t, auditArch, uint32(c.nr), c.args...); got != c.want {
			t.Errorf("system call %d %x: %#x, want %#x", c.nr, c.args, got, c.want)
		}
	}
	// a foreign architecture is killed
	for _, arch := range []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM, unix.AUDIT_ARCH_X86_64 ^ auditArch ^ unix.AUDIT_ARCH_AARCH64} {
		if arch == auditArch {
			continue
		}
		if got := runFilter(t, arch, unix.SYS_READ); got != retKill {
			t.Errorf("arch %#x: %#x, want kill", arch, got)
		}
	}
}
