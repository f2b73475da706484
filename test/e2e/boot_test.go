//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"debug/pe"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"gopkg.in/yaml.v3"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/test/qemuaccel"
)

// OVMF from Debian's ovmf package: plain UEFI, no Secure Boot.
const (
	ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// bootUnit runs the check script that comes with it as a credential. It
// and the drop-in that pulls it into the boot reach the guest as SMBIOS
// type 11 credentials (systemd 256 and later), so the disk under test is
// booted exactly as built.
const bootUnit = `[Unit]
Description=podvm boot check (a test credential, not part of the image)
After=multi-user.target

[Service]
Type=simple
ImportCredential=podvm.*
ExecStart=/bin/sh %d/podvm.bootcheck
`

// bootChecks are what bootcheck.sh reports for a GPU image, besides one
// unit:<name> check per GPU unit.
var bootChecks = []string{"boot", "offline", "module", "nouveau", "repo-update", "repo-headers", "repo-image"}

// bootResult is what one boot reported.
type bootResult struct {
	Accel  string
	Checks map[string]string // name -> "ok ..." or "FAIL ..."
	Log    []string
	Time   string // systemd-analyze's line
	Took   time.Duration
}

// guestSpec says what the check script looks for in a GPU image.
type guestSpec struct {
	Module   string   // the NVIDIA module's name, "" for none
	GPUUnits []string // units gated on an NVIDIA PCI device
	Sources  string   // the ConfigMap's sources entry
	// Expose is where the image binds the repository for the GPU
	// Operator, "" for nowhere.
	Expose string
	// InitrdOnHost: the kernel boots as a unified kernel image, whose
	// initrd the test checks on the host instead of in the guest.
	InitrdOnHost bool
	// AgentUnits are the units the pod VM binaries tree enables; none for
	// a GPU base image.
	AgentUnits []string
	// Verity: the root must be a read-only dm-verity device.
	Verity bool
	// GrowTo, when not 0, boots the disk as a larger one of this many
	// bytes (a copy-on-write overlay, as a cloud volume is larger than
	// the image), whose root must have grown to it.
	GrowTo int64
}

// bootCheck boots disk (copy-on-write: the disk is not changed) under
// QEMU with OVMF, no network device and no GPU, runs bootcheck.sh in the
// guest and returns its report. KVM is tried first; where it cannot run the
// guest kernel the boot is repeated under TCG, and the log says which ran.
func bootCheck(t *testing.T, disk string, spec guestSpec) bootResult {
	t.Helper()
	for _, f := range []string{ovmfCode, ovmfVars} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s: %v (install the ovmf package)", f, err)
		}
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: install qemu-system-x86")
	}
	script, err := os.ReadFile(filepath.Join(builderRepoRoot(t), "test/e2e/testdata/bootcheck.sh"))
	must(t, err)
	initrd := "image"
	if spec.InitrdOnHost {
		initrd = "host"
	}
	verity := ""
	if spec.Verity {
		verity = "1"
	}
	growMin := int64(0)
	if spec.GrowTo > 0 {
		// The overlay: the image below, a larger disk above, at least
		// 4 GiB larger than the image. The guest's root must then hold
		// all but the ESP, the GPT and ext4's own overhead: at least the
		// new size less 1 GiB, which a root that did not grow (at most
		// the image's size) cannot.
		var info struct {
			VirtualSize int64 `json:"virtual-size"`
		}
		out, err := exec.Command("qemu-img", "info", "--output=json", disk).Output()
		must(t, err)
		must(t, json.Unmarshal(out, &info))
		size := max(spec.GrowTo, info.VirtualSize+4<<30)
		overlay := filepath.Join(t.TempDir(), "grown.qcow2")
		run(t, "/", "qemu-img", "create", "-q", "-f", "qcow2", "-b", disk, "-F", diskFormat(disk), overlay, strconv.FormatInt(size, 10))
		t.Logf("booting %s (%d MiB) as a disk of %d MiB", filepath.Base(disk), info.VirtualSize>>20, size>>20)
		disk, growMin = overlay, size-1<<30
	}
	env := fmt.Sprintf("MODULE=%q\nGPU_UNITS=%q\nHEADERS_PREFIX=linux-headers-\nINITRD=%s\nEXPOSE=%q\nAGENT_UNITS=%q\nVERITY=%s\nGROW_MIN=%d\n",
		spec.Module, strings.Join(spec.GPUUnits, " "), initrd, spec.Expose, strings.Join(spec.AgentUnits, " "), verity, growMin)
	creds := map[string]string{
		"systemd.extra-unit.podvm-bootcheck.service":        bootUnit,
		"systemd.unit-dropin.multi-user.target~podvm-check": "[Unit]\nWants=podvm-bootcheck.service\n",
		"podvm.bootcheck":     string(script),
		"podvm.bootcheck.env": env,
		"podvm.sources":       spec.Sources,
	}
	work := t.TempDir()
	var smbios []string
	names := make([]string, 0, len(creds))
	for n := range creds {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		p := filepath.Join(work, fmt.Sprintf("cred%d", i))
		must(t, os.WriteFile(p, []byte("io.systemd.credential.binary:"+n+"="+base64.StdEncoding.EncodeToString([]byte(creds[n]))), 0o600))
		smbios = append(smbios, "-smbios", "type=11,path="+p)
	}

	accel := qemuaccel.Choose()
	t.Logf("accelerator: %s", accel)
	accels := []string{accel.Accel}
	if accel.Accel == qemuaccel.KVM {
		accels = append(accels, qemuaccel.TCG)
	}
	panicked := false
	for i := 0; i < len(accels); i++ {
		res, again := bootOnce(t, work, disk, accels[i], smbios, !panicked)
		switch again {
		case "":
			return res
		case againKVM:
			// bootOnce said why; the next accelerator is TCG.
		case againPanic:
			// Seen under multi-threaded TCG on a loaded host: an int3
			// Oops from the kernel's live code patching, early in boot.
			// The disk is booted with snapshot=on: one more boot, said.
			t.Logf("the guest kernel panicked under %s; booting once more", accels[i])
			panicked = true
			accels = append(accels, accels[i])
		}
	}
	t.Fatal("unreachable")
	return bootResult{}
}

// Why bootOnce asks for another boot.
const (
	againKVM   = "kvm"   // KVM failed before the guest kernel ran
	againPanic = "panic" // the guest kernel panicked, the first time
)

// bootOnce runs one VM to its power-off. again is "" when it did, else why
// another boot may do better.
func bootOnce(t *testing.T, work, disk, accel string, smbios []string, mayRetry bool) (res bootResult, again string) {
	t.Helper()
	res = bootResult{Accel: accel, Checks: map[string]string{}}
	vars := filepath.Join(work, "OVMF_VARS.fd")
	data, err := os.ReadFile(ovmfVars)
	must(t, err)
	must(t, os.WriteFile(vars, data, 0o600))
	console, results := filepath.Join(work, accel+"-console.log"), filepath.Join(work, accel+"-results.log")
	args := []string{"-machine", "q35", "-m", "2048", "-smp", "2", "-nographic", "-nic", "none",
		"-drive", "if=pflash,format=raw,readonly=on,file=" + ovmfCode,
		"-drive", "if=pflash,format=raw,file=" + vars,
		"-drive", "file=" + disk + ",format=" + diskFormat(disk) + ",if=virtio,snapshot=on",
		"-serial", "file:" + console, "-serial", "file:" + results,
		"-monitor", "none", "-display", "none"}
	args = append(args, qemuaccel.Args(accel, 2, 2)...)
	args = append(args, smbios...)
	cmd := exec.Command("qemu-system-x86_64", args...)
	// builderOutput is safe for QEMU's output goroutines and the watcher.
	var stderr builderOutput
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Under KVM, any failure before the guest kernel's first line is KVM's,
	// not the image's, and so is a KVM internal error at any time: the boot
	// is repeated under TCG.
	kvmFailed := func(why string) bool {
		if accel != qemuaccel.KVM {
			return false
		}
		if !strings.Contains(stderr.String(), "KVM internal error") && qemuaccel.SignOfLife(readFile(console)) {
			return false
		}
		t.Logf("KVM failed before the guest kernel ran (%s, after %s): booting again under TCG; qemu said:\n%s",
			why, time.Since(start).Round(time.Second), tail(stderr.String(), 5))
		return true
	}
	deadline := time.After(12 * time.Minute)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if (strings.Contains(stderr.String(), "KVM internal error") || time.Since(start) > 3*time.Minute) && kvmFailed("no kernel output or a KVM internal error") {
				cmd.Process.Kill()
				<-done
				return res, againKVM
			}
			// A panicked guest never powers off: stop waiting for it.
			if strings.Contains(readFile(console), "Kernel panic - not syncing") {
				cmd.Process.Kill()
				<-done
				t.Logf("console (last lines):\n%s", tail(readFile(console), 40))
				if mayRetry {
					return res, againPanic
				}
				t.Fatalf("the %s guest kernel panicked again", accel)
			}
		case <-deadline:
			cmd.Process.Kill()
			<-done
			t.Logf("console (last lines):\n%s", tail(readFile(console), 60))
			t.Fatalf("the %s VM did not power off within 12 minutes; results so far:\n%s", accel, readFile(results))
		}
	}
	res.Took = time.Since(start)
	if err != nil && kvmFailed(fmt.Sprintf("qemu: %v", err)) {
		return res, againKVM
	}
	if err != nil {
		t.Logf("console (last lines):\n%s", tail(readFile(console), 60))
		t.Fatalf("qemu (%s): %v\n%s", accel, err, stderr.String())
	}
	out := readFile(results)
	sc := bufio.NewScanner(strings.NewReader(out))
	end := false
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case strings.HasPrefix(line, "PODVM-CHECK-END"):
			end = true
		case strings.HasPrefix(line, "PODVM-CHECK "):
			name, verdict, _ := strings.Cut(strings.TrimPrefix(line, "PODVM-CHECK "), " ")
			res.Checks[name] = verdict
		case strings.HasPrefix(line, "PODVM-TIME "):
			res.Time = strings.TrimPrefix(line, "PODVM-TIME ")
		case strings.HasPrefix(line, "PODVM-LOG "):
			res.Log = append(res.Log, strings.TrimPrefix(line, "PODVM-LOG "))
		}
	}
	if !end {
		t.Logf("console (last lines):\n%s", tail(readFile(console), 80))
		t.Fatalf("the boot check did not finish (no END line): the guest never ran it or died in it; results:\n%s", out)
	}
	return res, ""
}

// assertBoot fails on every check that failed or did not report.
func assertBoot(t *testing.T, res bootResult, spec guestSpec) {
	t.Helper()
	t.Logf("booted under %s, powered off after %s; %s", res.Accel, res.Took.Round(time.Second), res.Time)
	want := slices.Clone(bootChecks)
	if spec.Module == "" {
		want = []string{"boot", "offline", "repo-update", "repo-headers", "repo-image"}
	}
	for _, u := range spec.GPUUnits {
		want = append(want, "unit:"+u)
		if u == "nvidia-persistenced.service" {
			want = append(want, "persistenced-uvm")
		}
	}
	if spec.Expose != "" {
		want = append(want, "expose")
	}
	if len(spec.AgentUnits) > 0 {
		want = append(want, "agent-enabled", "agent-chain", "agent-links", "agent-order")
	}
	if spec.Verity {
		want = append(want, "verity")
	}
	if spec.GrowTo > 0 {
		want = append(want, "grown")
	}
	for _, name := range want {
		v, ok := res.Checks[name]
		switch {
		case !ok:
			t.Errorf("boot check %s did not report", name)
		case !strings.HasPrefix(v, "ok"):
			t.Errorf("boot check %s: %s", name, v)
		default:
			t.Logf("boot check %s: %s", name, v)
		}
	}
	if t.Failed() {
		t.Logf("guest log:\n%s", strings.Join(res.Log, "\n"))
	}
}

// exposeWhere is where the repository's bind unit at path mounts it: the
// last word of its mount command.
func exposeWhere(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the image has no unit binding the repository, which the table's default asks for: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart=mount --bind -o ro "); ok {
			if f := strings.Fields(cmd); len(f) == 2 {
				return f[1]
			}
		}
	}
	t.Fatalf("%s: no ExecStart=mount --bind -o ro REPO WHERE:\n%s", path, b)
	return ""
}

// imageSpec reads what to check from the image tree: the NVIDIA module
// built for its kernel, the units the plan gated on a GPU, and the sources
// entry of the GPU Operator ConfigMap among the host artefacts.
func imageSpec(t *testing.T, rootfs, arts string) guestSpec {
	t.Helper()
	var spec guestSpec
	must(t, filepath.WalkDir(filepath.Join(rootfs, "usr/lib/modules"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, m := range []string{"nvidia-current", "nvidia"} {
			if strings.HasPrefix(d.Name(), m+".ko") && spec.Module == "" {
				spec.Module = m
			}
		}
		return nil
	}))
	gates, err := filepath.Glob(filepath.Join(rootfs, "etc/systemd/system/*.d/podvm-gpu-gate.conf"))
	must(t, err)
	for _, g := range gates {
		spec.GPUUnits = append(spec.GPUUnits, strings.TrimSuffix(filepath.Base(filepath.Dir(g)), ".d"))
	}
	spec.Sources = configMapSources(t, arts)
	spec.Expose = exposeWhere(t, filepath.Join(rootfs, "etc/systemd/system", gpustack.ExposeUnit))
	if !strings.Contains(spec.Sources, "URIs: file://"+spec.Expose+"\n") {
		t.Errorf("the ConfigMap's sources do not point at %s:\n%s", spec.Expose, spec.Sources)
	}
	return spec
}

// configMapSources is the sources entry the GPU Operator ConfigMap carries.
func configMapSources(t *testing.T, arts string) string {
	t.Helper()
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	b, err := os.ReadFile(filepath.Join(arts, bake.ConfigMapFile))
	must(t, err)
	must(t, yaml.Unmarshal(b, &cm))
	sources := cm.Data[bake.SourcesFile]
	if sources == "" {
		t.Fatalf("ConfigMap has no %s", bake.SourcesFile)
	}
	return sources
}

// assertNoNouveauInUKI lists the files of a unified kernel image's initrd
// (its .initrd section: concatenated newc cpio archives, zstd-compressed or
// plain) and fails if a nouveau module is among them. Listing a virtio
// module proves the archives were read at all.
func assertNoNouveauInUKI(t *testing.T, uki string) {
	t.Helper()
	f, err := pe.Open(uki)
	must(t, err)
	defer f.Close()
	sec := f.Section(".initrd")
	if sec == nil {
		t.Fatalf("%s has no .initrd section", uki)
	}
	data, err := sec.Data()
	must(t, err)
	assertNoNouveauInInitrd(t, uki, data)
}

// assertNoNouveauInInitrd is assertNoNouveauInUKI for the initrd data
// (from a UKI, or initramfs-tools' file) of what.
func assertNoNouveauInInitrd(t *testing.T, what string, data []byte) {
	t.Helper()
	var names []string
	names = append(names, cpioNames(data)...)
	magic := []byte{0x28, 0xb5, 0x2f, 0xfd}
	for off := 0; ; off += len(magic) {
		i := bytes.Index(data[off:], magic)
		if i < 0 {
			break
		}
		off += i
		d, err := zstd.NewReader(bytes.NewReader(data[off:]))
		if err != nil {
			continue
		}
		var out bytes.Buffer
		io.Copy(&out, d) // a stream ends at padding or the next archive: what came before is kept
		d.Close()
		names = append(names, cpioNames(out.Bytes())...)
	}
	virtio, nouveau := 0, []string{}
	for _, n := range names {
		base := filepath.Base(n)
		if strings.HasPrefix(base, "virtio") && strings.Contains(base, ".ko") {
			virtio++
		}
		if strings.HasPrefix(base, "nouveau.ko") {
			nouveau = append(nouveau, n)
		}
	}
	if virtio == 0 {
		t.Fatalf("listed no virtio module in the initrd of %s (%d files, %d MiB compressed)", what, len(names), len(data)>>20)
	}
	if len(nouveau) > 0 {
		t.Errorf("nouveau is in the initrd of %s: %v", what, nouveau)
	} else {
		t.Logf("initrd of %s: %d files, %d virtio modules, no nouveau module", filepath.Base(what), len(names), virtio)
	}
}

// cpioNames lists the file names of the newc ("070701") cpio archives that
// follow each other in b, skipping the zero padding between archives.
func cpioNames(b []byte) []string {
	var names []string
	for len(b) >= 110 {
		if b[0] == 0 {
			b = b[1:]
			continue
		}
		if string(b[:6]) != "070701" && string(b[:6]) != "070702" {
			break
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[6+8*i:6+8*i+8]), 16, 32)
			if err != nil {
				return -1
			}
			return int(v)
		}
		size, nameLen := field(6), field(11)
		if size < 0 || nameLen <= 0 || 110+nameLen > len(b) {
			break
		}
		name := string(b[110 : 110+nameLen-1])
		pad := func(n int) int { return (n + 3) &^ 3 }
		next := pad(110+nameLen) + pad(size)
		if name != "TRAILER!!!" {
			names = append(names, name)
		}
		if next > len(b) {
			break
		}
		b = b[next:]
	}
	return names
}

// logDisk prints a disk's virtual size and the space it takes.
func logDisk(t *testing.T, disk string) {
	t.Helper()
	out, err := exec.Command("qemu-img", "info", disk).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v\n%s", disk, err, out)
	}
	var virtual, onDisk string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "virtual size: "); ok {
			virtual = v
		}
		if v, ok := strings.CutPrefix(line, "disk size: "); ok {
			onDisk = v
		}
	}
	t.Logf("disk %s: virtual size %s, on disk %s", filepath.Base(disk), virtual, onDisk)
}

// diskFormat is QEMU's name for the disk's format, from its file name.
func diskFormat(disk string) string {
	if strings.HasSuffix(disk, ".qcow2") {
		return "qcow2"
	}
	return "raw"
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
