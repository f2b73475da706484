// Package qemuaccel decides which accelerator the tests' QEMU guests run
// under. KVM can be present and still unusable: /dev/kvm opens, yet QEMU
// aborts setting up the vCPU ("failed to set MSR ...") or the guest kernel
// dies in an emulation failure. So KVM is used only after a tiny guest has
// run under it, and a boot that fails under KVM before the guest shows a
// sign of life is repeated under TCG (see Boot): a test fails only for the
// image's own faults.
package qemuaccel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The accelerators.
const (
	KVM = "kvm"
	TCG = "tcg"
)

// Decision is the accelerator to use and why, for the test log.
type Decision struct {
	Accel  string
	Reason string
}

func (d Decision) String() string { return d.Accel + " (" + d.Reason + ")" }

// Prober runs the probe. The zero value probes the host's QEMU and
// /dev/kvm; tests set the fields.
type Prober struct {
	QEMU      string        // default: qemu-system-x86_64 on PATH
	KVMDevice string        // default: /dev/kvm
	Timeout   time.Duration // default: 30 s
}

// probeExit is the status QEMU exits with when the probe guest has run:
// isa-debug-exit turns the guest's write of v into (v<<1)|1.
const (
	probeValue = 0x10
	probeExit  = probeValue<<1 | 1
)

// firmware is a 64 KiB ROM, QEMU's -bios, that the vCPU runs from its reset
// vector in real mode: it writes "OK" to the first serial port, then
// probeValue to the isa-debug-exit port, which ends QEMU. No firmware, disk
// or kernel is involved, so it checks KVM itself and nothing else.
func firmware() []byte {
	rom := make([]byte, 64<<10)
	code := []byte{
		0xba, 0xf8, 0x03, // mov dx, 0x3f8
		0xb0, 'O', 0xee, // mov al, 'O'; out dx, al
		0xb0, 'K', 0xee, // mov al, 'K'; out dx, al
		0xb0, '\n', 0xee, // mov al, '\n'; out dx, al
		0xb0, probeValue, // mov al, probeValue
		0xe6, 0xf4, // out 0xf4, al
		0xf4,       // hlt
		0xeb, 0xfd, // jmp back to hlt
	}
	const codeAt = 0xffc0 // IP of the code within the reset segment
	copy(rom[codeAt:], code)
	// The reset vector, IP 0xfff0: a short jump back to the code.
	rom[0xfff0] = 0xeb
	rel := int8(codeAt - 0xfff2) // rel8 from the next instruction
	rom[0xfff1] = byte(rel)
	return rom
}

// Probe decides between KVM and TCG: KVM when the device opens and a tiny
// guest runs under it to its end, else TCG with the reason.
func (p Prober) Probe(ctx context.Context) Decision {
	dev := p.KVMDevice
	if dev == "" {
		dev = "/dev/kvm"
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return Decision{TCG, fmt.Sprintf("no usable %s: %v", dev, err)}
	}
	f.Close()
	if err := p.runProbe(ctx); err != nil {
		return Decision{TCG, "KVM probe failed: " + err.Error()}
	}
	return Decision{KVM, "a probe guest ran under KVM"}
}

func (p Prober) runProbe(ctx context.Context) error {
	qemu := p.QEMU
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	dir, err := os.MkdirTemp("", "qemuaccel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rom := filepath.Join(dir, "probe.rom")
	if err := os.WriteFile(rom, firmware(), 0o600); err != nil {
		return err
	}
	return runGuest(ctx, qemu, KVM, rom, timeout)
}

// runGuest runs the probe ROM under accel and checks that it ran to its end.
func runGuest(ctx context.Context, qemu, accel, rom string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"-machine", "q35", "-m", "32", "-nodefaults", "-display", "none",
		"-no-reboot", "-bios", rom, "-serial", "stdio",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"}
	if accel == KVM {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg")
	}
	cmd := exec.CommandContext(ctx, qemu, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("no end after %s: %s", timeout, lastLines(out.String(), 3))
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == probeExit && strings.Contains(out.String(), "OK") {
		return nil
	}
	if err == nil {
		return fmt.Errorf("qemu exited 0 without the probe's exit: %s", lastLines(out.String(), 3))
	}
	return fmt.Errorf("%v: %s", err, lastLines(out.String(), 3))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

var (
	once   sync.Once
	chosen Decision
)

// Choose probes once per process and returns the same decision after.
func Choose() Decision {
	once.Do(func() { chosen = Prober{}.Probe(context.Background()) })
	return chosen
}

// Args are QEMU's arguments for accel. smp is the vCPU count under KVM;
// TCG guests get tcgSMP, since multi-threaded TCG on a loaded host has
// raced guest kernels' code patching.
func Args(accel string, smp, tcgSMP int) []string {
	if accel == KVM {
		return []string{"-smp", fmt.Sprint(smp), "-accel", "kvm", "-cpu", "host"}
	}
	tcg := "tcg"
	if tcgSMP > 1 {
		tcg = "tcg,thread=multi"
	}
	return []string{"-smp", fmt.Sprint(tcgSMP), "-accel", tcg, "-cpu", "max"}
}

// SignOfLife reports whether a guest's serial console shows its kernel
// running. A broken KVM fails before that (in QEMU's vCPU setup, or in the
// kernel's decompressor); after it, a failure is the guest's own.
func SignOfLife(console string) bool {
	return strings.Contains(console, "Linux version")
}
