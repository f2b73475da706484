package qemuaccel

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
)

// fakeQEMU writes a qemu-system-x86_64 stand-in that behaves as body says.
func fakeQEMU(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu-system-x86_64")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProbe covers every way KVM can be present and broken: the decision
// falls back to TCG on each, and says why.
func TestProbe(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "kvm")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		device     string
		qemu       string
		wantAccel  string
		wantReason string
	}{
		{"no device", filepath.Join(t.TempDir(), "absent"), fakeQEMU(t, "exit 99"), TCG, "no usable"},
		{"MSR assertion (the fresh CI machine)", dev, fakeQEMU(t,
			"echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69' >&2\n"+
				"echo \"kvm_buf_set_msrs: Assertion \\`ret == cpu->kvm_msr_buf->nmsrs' failed.\" >&2\n"+
				"kill -ABRT $$"), TCG, "failed to set MSR"},
		{"KVM internal error", dev, fakeQEMU(t, `echo "KVM internal error. Suberror: 1" >&2; exit 1`), TCG, "KVM internal error"},
		{"hangs", dev, fakeQEMU(t, `exec sleep 60`), TCG, "no end after"},
		{"exits 0 without running the guest", dev, fakeQEMU(t, `exit 0`), TCG, "without the probe's exit"},
		{"right status, no output", dev, fakeQEMU(t, `exit 33`), TCG, "exit status 33"},
		{"the guest ran", dev, fakeQEMU(t, `echo OK; exit 33`), KVM, "probe guest ran"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Prober{QEMU: tt.qemu, KVMDevice: tt.device, Timeout: 2 * time.Second}
			d := p.Probe(context.Background())
			if d.Accel != tt.wantAccel || !strings.Contains(d.Reason, tt.wantReason) {
				t.Fatalf("Probe = %s, want %s with a reason containing %q", d, tt.wantAccel, tt.wantReason)
			}
		})
	}
}

// TestProbeGuestRuns boots the probe firmware in the real QEMU under TCG:
// the guest the KVM probe relies on really runs to its exit.
func TestProbeGuestRuns(t *testing.T) {
	chroottest.RequireTools(t, "qemu-system-x86_64")
	rom := filepath.Join(t.TempDir(), "probe.rom")
	if err := os.WriteFile(rom, firmware(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runGuest(context.Background(), "qemu-system-x86_64", TCG, rom, time.Minute); err != nil {
		t.Fatalf("the probe guest under TCG: %v", err)
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		accel string
		smp   int
		tcg   int
		want  string
	}{
		{KVM, 2, 1, "-smp 2 -accel kvm -cpu host"},
		{TCG, 2, 1, "-smp 1 -accel tcg -cpu max"},
		{TCG, 2, 2, "-smp 2 -accel tcg,thread=multi -cpu max"},
	}
	for _, tt := range tests {
		if got := strings.Join(Args(tt.accel, tt.smp, tt.tcg), " "); got != tt.want {
			t.Errorf("Args(%s, %d, %d) = %q, want %q", tt.accel, tt.smp, tt.tcg, got, tt.want)
		}
	}
}

func TestSignOfLife(t *testing.T) {
	tests := []struct {
		console string
		want    bool
	}{
		{"BdsDxe: loading Boot0001\nEFI stub: Loaded initrd\n", false},
		{"[    0.000000] Linux version 6.12.57+deb13-amd64 (debian-kernel@lists.debian.org)\n", true},
		{"", false},
	}
	for _, tt := range tests {
		if got := SignOfLife(tt.console); got != tt.want {
			t.Errorf("SignOfLife(%q) = %v, want %v", tt.console, got, tt.want)
		}
	}
}
