package rootfs

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/distro"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel/kerneltest"
)

func TestParseDiskSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true}, {"auto", 0, true}, {"4G", 4 * gib, true}, {"3072M", 3072 * mib, true},
		{"0G", 0, false}, {"4GB", 0, false}, {"4g", 0, false}, {"-1G", 0, false}, {"1.5G", 0, false},
		{"99999999999999999999G", 0, false}, {"1048577G", 0, false},
	}
	for _, tt := range tests {
		got, err := parseDiskSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseDiskSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestNewLayout(t *testing.T) {
	l, err := newLayout(0, 600*mib, espSize, "amd64", "11111111-2222-4333-8444-555555555555")
	if err != nil {
		t.Fatal(err)
	}
	if l.Size%(256*mib) != 0 || l.Size < 600*mib+600*mib/4+gib+espSize {
		t.Errorf("auto size %d MiB does not fit 600 MiB with room", l.Size/mib)
	}
	if l.ESPStart != mib || l.RootStart != mib+espSize || l.RootStart+l.RootSize != l.Size-mib {
		t.Errorf("layout %+v: partitions not MiB aligned or overlapping the GPTs", l)
	}
	if l, err := newLayout(4*gib+1, 0, espSize, "amd64", "u"); err != nil || l.Size != 4*gib+mib {
		t.Errorf("explicit size rounds up to a MiB: %d, %v", l.Size, err)
	}
	if _, err := newLayout(1*gib, 2*gib, espSize, "amd64", "u"); err == nil || !strings.Contains(err.Error(), "disk_size 1024M is too small") {
		t.Errorf("too small: %v", err)
	}
	if _, err := newLayout(0, 0, espSize, "s390x", "u"); err == nil {
		t.Error("unknown architecture accepted")
	}
}

// findBootKernels follows imagekernel's rule on the fixture trees every
// reader of the image's kernels is tested on, then finds each kernel's
// image and initramfs.
func TestFindBootKernels(t *testing.T) {
	for _, tree := range kerneltest.Trees {
		t.Run(tree.Name, func(t *testing.T) {
			root := t.TempDir()
			kerneltest.Build(t, root, tree)
			must(t, os.MkdirAll(filepath.Join(root, "boot"), 0o755))
			for _, v := range tree.Want {
				must(t, os.WriteFile(filepath.Join(root, "boot", "initrd.img-"+v), []byte("i"), 0o644))
			}
			ks, err := findBootKernels(root)
			var got []string
			for _, k := range ks {
				got = append(got, k.Version)
			}
			switch {
			case tree.Refused != "":
				if err == nil || !strings.Contains(err.Error(), tree.Refused) {
					t.Errorf("%q, %v; want %q refused", got, err, tree.Refused)
				}
			case len(tree.Want) == 0:
				if err == nil || !strings.Contains(err.Error(), "no kernel in the image") {
					t.Errorf("%q, %v; want no kernel", got, err)
				}
			case err != nil || !slices.Equal(got, tree.Want):
				t.Errorf("%q, %v; want %q", got, err, tree.Want)
			}
		})
	}
	// The image and initramfs of each, relative to the tree; the image
	// from the modules directory when /boot has none.
	root := t.TempDir()
	kerneltest.Build(t, root, kerneltest.Tree{Entries: []string{
		"usr/lib/modules/6.12.9-amd64/", "boot/vmlinuz-6.12.9-amd64", "boot/initrd.img-6.12.9-amd64",
		"usr/lib/modules/6.12.10-amd64/vmlinuz", "boot/initramfs-6.12.10-amd64.img"}})
	ks, err := findBootKernels(root)
	want := []bootKernel{{"6.12.9-amd64", "boot/vmlinuz-6.12.9-amd64", "boot/initrd.img-6.12.9-amd64"},
		{"6.12.10-amd64", "usr/lib/modules/6.12.10-amd64/vmlinuz", "boot/initramfs-6.12.10-amd64.img"}}
	if err != nil || !slices.Equal(ks, want) {
		t.Errorf("findBootKernels = %+v, %v; want %+v", ks, err, want)
	}
	for name, entries := range map[string][]string{
		"has no initramfs":                        {"usr/lib/modules/6.12.10-amd64/", "boot/vmlinuz-6.12.10-amd64"},
		"neither /boot/vmlinuz-6.12.10-amd64 nor": {"usr/lib/modules/6.12.10-amd64/", "boot/vmlinuz-6.12.10-amd64/"},
		"not a kernel release":                    {"usr/lib/modules/6.1$(touch${IFS}x)/", "boot/vmlinuz-6.1$(touch${IFS}x)", "boot/initrd.img-6.1$(touch${IFS}x)"},
		"no kernel in the image":                  nil,
	} {
		root := t.TempDir()
		kerneltest.Build(t, root, kerneltest.Tree{Entries: entries})
		if _, err := findBootKernels(root); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: error %v, want %q", entries, err, name)
		}
	}
}

// TestBuildDisk writes a disk from a small tree with the real tools and
// reads it back: the GPT, the ESP's boot loader and entries, and the root
// file system's files, owners and fstab.
func TestBuildDisk(t *testing.T) {
	chroottest.RequireRoot(t)
	chroottest.RequireTools(t, "sfdisk", "mkfs.ext4", "mkfs.vfat", "mmd", "mcopy", "mtype", "debugfs", "qemu-img")
	root := t.TempDir()
	for p, content := range map[string]string{
		"usr/lib/modules/6.12.9-amd64/modules.dep":     "",
		"usr/lib/modules/6.12.10-amd64/modules.dep":    "",
		"boot/vmlinuz-6.12.9-amd64":                    "old kernel",
		"boot/initrd.img-6.12.9-amd64":                 "old initrd",
		"boot/vmlinuz-6.12.10-amd64":                   "new kernel",
		"boot/initrd.img-6.12.10-amd64":                "new initrd",
		"usr/lib/systemd/boot/efi/systemd-bootx64.efi": "the image's systemd-boot",
		"etc/os-release":                               "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n",
		"etc/fstab":                                    "# UNCONFIGURED FSTAB\n",
		"opt/local-packages/Release":                   "Origin: test\n",
	} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(content), 0o644))
	}
	must(t, os.Chown(filepath.Join(root, "opt/local-packages/Release"), 0, 0))
	out := filepath.Join(t.TempDir(), "disk.qcow2")
	var said []string
	res, err := buildDisk(context.Background(), diskBuild{Root: root, Arch: "amd64", Format: formatQcow2, Size: 2 * gib,
		Cmdline: distro.KernelCmdline, Output: out, HostBootloaderDir: "/nonexistent", Say: func(s string) { said = append(said, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bootloader != filepath.Join(root, "usr/lib/systemd/boot/efi/systemd-bootx64.efi") {
		t.Errorf("boot loader %s: the image's own comes first", res.Bootloader)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".podvm-disk-*")); len(left) > 0 {
		t.Errorf("work files left: %v", left)
	}

	raw := filepath.Join(t.TempDir(), "disk.raw")
	run(t, "qemu-img", "convert", "-O", "raw", out, raw)
	var table struct {
		PartitionTable struct {
			Label      string
			Partitions []struct {
				Start, Size int64
				Type, UUID  string
			}
		}
	}
	must(t, json.Unmarshal([]byte(run(t, "sfdisk", "--json", raw)), &table))
	pt := table.PartitionTable
	if pt.Label != "gpt" || len(pt.Partitions) != 2 || pt.Partitions[0].Type != espType || pt.Partitions[1].Type != rootTypes["amd64"] ||
		!strings.EqualFold(pt.Partitions[1].UUID, res.Layout.PartUUID) || pt.Partitions[0].Start != 2048 {
		t.Fatalf("partition table %+v, want GPT with ESP at 1 MiB and root %s", pt, res.Layout.PartUUID)
	}

	esp := raw + "@@" + itoa(res.Layout.ESPStart)
	mtype := func(p string) string {
		cmd := exec.Command("mtype", "-i", esp, "::"+p)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mtype %s: %v\n%s", p, err, b)
		}
		return string(b)
	}
	if got := mtype("/EFI/BOOT/BOOTX64.EFI"); got != "the image's systemd-boot" {
		t.Errorf("BOOTX64.EFI %q", got)
	}
	if got := mtype("/loader/loader.conf"); !strings.Contains(got, "default podvm-6.12.10-amd64.conf") || !strings.Contains(got, "editor no") {
		t.Errorf("loader.conf boots the newest kernel without an editor:\n%s", got)
	}
	entry := mtype("/loader/entries/podvm-6.12.9-amd64.conf")
	for _, want := range []string{"title Debian GNU/Linux 13 (trixie)", "linux /podvm/6.12.9-amd64/vmlinuz", "initrd /podvm/6.12.9-amd64/initrd.img",
		"options root=PARTUUID=" + res.Layout.PartUUID + " rw console=tty0 console=ttyS0,115200n8"} {
		if !strings.Contains(entry, want) {
			t.Errorf("entry lacks %q:\n%s", want, entry)
		}
	}
	if got := mtype("/podvm/6.12.10-amd64/initrd.img"); got != "new initrd" {
		t.Errorf("initrd %q", got)
	}

	rootfs := filepath.Join(t.TempDir(), "root.ext4")
	f, err := os.Create(rootfs)
	must(t, err)
	src, err := os.Open(raw)
	must(t, err)
	_, err = src.Seek(res.Layout.RootStart, 0)
	must(t, err)
	_, err = f.ReadFrom(io.LimitReader(src, res.Layout.RootSize))
	must(t, err)
	f.Close()
	src.Close()
	if got := run(t, "debugfs", "-R", "cat /etc/fstab", rootfs); !strings.Contains(got, "PARTUUID="+res.Layout.PartUUID+" / ext4 rw,errors=remount-ro,x-systemd.growfs ") {
		t.Errorf("fstab in the disk (the root by PARTUUID, grown at boot):\n%s", got)
	}
	// The root partition grows to the disk at boot: systemd-repart's
	// definition matches it by its type.
	if got := run(t, "debugfs", "-R", "cat "+growRootConf, rootfs); !strings.Contains(got, "[Partition]\nType=root\n") {
		t.Errorf("%s in the disk:\n%s", growRootConf, got)
	}
	if got := run(t, "debugfs", "-R", "stat /opt/local-packages/Release", rootfs); !strings.Contains(got, "User:     0   Group:     0") {
		t.Errorf("owner not kept:\n%s", got)
	}
	if got := run(t, "dumpe2fs", "-h", rootfs); !strings.Contains(got, "Filesystem volume name:   "+rootLabel) {
		t.Errorf("label:\n%s", got)
	}
	// The inode tables are marked zeroed (mke2fs discarded the range), so
	// a booting VM does not zero them; only the first group's is written.
	groups, zeroed := 0, 0
	for _, l := range strings.Split(run(t, "dumpe2fs", rootfs), "\n") {
		if strings.HasPrefix(l, "Group ") {
			groups++
			if strings.Contains(l, "ITABLE_ZEROED") {
				zeroed++
			}
		}
	}
	if groups == 0 || zeroed < groups-1 {
		t.Errorf("%d of %d block groups have their inode table marked zeroed, want all but the first", zeroed, groups)
	}
	// The file system was made inside the partition: both GPT headers are
	// intact.
	if got := run(t, "sfdisk", "--verify", raw); !strings.Contains(got, "No errors detected") {
		t.Errorf("sfdisk --verify:\n%s", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return string(b)
}

// TestBuildDiskFormats checks what qemu-img makes of each disk format: a
// fixed VHD (Azure) must keep a virtual size of whole MiB.
func TestBuildDiskFormats(t *testing.T) {
	chroottest.RequireRoot(t)
	chroottest.RequireTools(t, "sfdisk", "mkfs.ext4", "mkfs.vfat", "mmd", "mcopy", "qemu-img")
	root := t.TempDir()
	for p, content := range map[string]string{
		"usr/lib/modules/6.12.10-amd64/modules.dep": "",
		"boot/vmlinuz-6.12.10-amd64":                "kernel",
		"boot/initrd.img-6.12.10-amd64":             "initrd",
		"etc/fstab":                                 "",
	} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(content), 0o644))
	}
	host := filepath.Join(t.TempDir(), "efi")
	must(t, os.MkdirAll(host, 0o755))
	must(t, os.WriteFile(filepath.Join(host, "systemd-bootx64.efi"), []byte("host systemd-boot"), 0o644))
	for format, qemuName := range map[string]string{formatRaw: "raw", formatQcow2: "qcow2", formatVHD: "vpc"} {
		t.Run(format, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "disk."+format)
			res, err := buildDisk(context.Background(), diskBuild{Root: root, Arch: "amd64", Format: format, Size: 1536 * mib,
				Cmdline: distro.KernelCmdline, Output: out, HostBootloaderDir: host, Say: func(string) {}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Bootloader != filepath.Join(host, "systemd-bootx64.efi") {
				t.Errorf("boot loader %s: the host's when the image has none", res.Bootloader)
			}
			var info struct {
				Format      string `json:"format"`
				VirtualSize int64  `json:"virtual-size"`
			}
			// qemu-img cannot tell a fixed VHD (raw data and a footer) by
			// probing, so the format is named, as Azure's tools do.
			must(t, json.Unmarshal([]byte(run(t, "qemu-img", "info", "-f", qemuName, "--output=json", out)), &info))
			if info.Format != qemuName || info.VirtualSize != 1536*mib {
				t.Errorf("qemu-img: format %s, virtual size %d; want %s, %d", info.Format, info.VirtualSize, qemuName, 1536*mib)
			}
			if fi, err := os.Stat(out); err != nil || (format == formatVHD && fi.Size() != 1536*mib+512) {
				t.Errorf("fixed VHD: %v bytes, want the disk and a 512-byte footer (%v)", fi.Size(), err)
			}
		})
	}
}
