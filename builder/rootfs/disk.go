package rootfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/distro"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel"
	"github.com/podvm-gpu/packer-plugin-podvm/staging"
)

// Disk formats; directory and tar leave or pack the tree only.
const (
	formatDirectory = "directory"
	formatTar       = "tar"
	formatRaw       = "raw"
	formatQcow2     = "qcow2"
	formatVHD       = "vhd"
)

var (
	formats     = []string{formatDirectory, formatTar, formatRaw, formatQcow2, formatVHD}
	diskFormats = []string{formatRaw, formatQcow2, formatVHD}
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
	// espSize holds systemd-boot and a few kernels with their initramfs.
	espSize = 256 * mib
	// minDiskSize is the smallest disk newLayout accepts: the smallest
	// ESP, both GPT copies with their alignment, and the root's headroom
	// for an empty tree. A real tree needs more; Prepare refuses less.
	minDiskSize = espSize + 2*mib + gib
	// rootLabel is the root file system's label; the boot entry finds the
	// root by PARTUUID, the label is for people.
	rootLabel = "podvm-root"
)

// GPT partition types (UAPI discoverable partitions specification).
const (
	espType = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
)

var rootTypes = map[string]string{
	"amd64": "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709",
	"arm64": "B921B045-1DF0-41C3-AF44-4C6F280D3FAE",
	"i386":  "44479540-F297-41B2-9AF7-D131D5F0458A",
}

// efiNames maps a Debian architecture to systemd-boot's file name and the
// removable-media boot path that firmware runs without any NVRAM entry.
var efiNames = map[string][2]string{
	"amd64": {"systemd-bootx64.efi", "BOOTX64.EFI"},
	"arm64": {"systemd-bootaa64.efi", "BOOTAA64.EFI"},
	"i386":  {"systemd-bootia32.efi", "BOOTIA32.EFI"},
}

// diskSizeRE is a size setting: a number with an M or G suffix.
var diskSizeRE = regexp.MustCompile(`^([1-9][0-9]*)([MG])$`)

// parseDiskSize turns "4G" or "3072M" into bytes; "" and "auto" are 0.
func parseDiskSize(s string) (int64, error) {
	if s == "" || s == "auto" {
		return 0, nil
	}
	m := diskSizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, errors.New(`is not a size; use "auto" or a whole number of MiB or GiB such as "3072M" or "4G"`)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > 1<<20 {
		return 0, errors.New("is too large; the largest size is 1048576G")
	}
	if m[2] == "G" {
		return n * gib, nil
	}
	return n * mib, nil
}

// bootKernel is one kernel of the tree with its initramfs.
type bootKernel struct {
	Version, Image, Initrd string // paths relative to the tree
}

// findBootKernels lists the tree's kernels (imagekernel's rule, the one the
// provisioner and the mkosi scripts follow), oldest first, each with its
// image and initramfs. A kernel without an initramfs cannot mount a root
// on a disk (ext4 is a module in distribution kernels), so it is an error,
// not a skip.
func findBootKernels(root string) ([]bootKernel, error) {
	tree, err := imagekernel.ReadRoot(root, chroot.ResolveIn)
	if err != nil {
		return nil, fmt.Errorf("find kernels: %w", err)
	}
	versions, err := imagekernel.Select(tree)
	if err != nil {
		return nil, fmt.Errorf("find kernels: %w", err)
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("%w: a bootable disk needs one; install linux-image-<arch> (and initramfs-tools) in the image, for example with a shell provisioner", imagekernel.ErrNone)
	}
	// /boot may be a link: resolve it inside the tree, never on the host.
	boot, err := chroot.ResolveIn(root, imagekernel.BootDir)
	if err != nil {
		return nil, fmt.Errorf("find kernels: %w", err)
	}
	rel, _ := filepath.Rel(root, boot)
	out := make([]bootKernel, 0, len(versions))
	for _, v := range versions {
		k := bootKernel{Version: v}
		// The image is /boot's, else the one in the modules directory,
		// links followed inside the tree only.
		for _, p := range []string{imagekernel.BootDir + "/vmlinuz-" + v, imagekernel.ModulesDir + "/" + v + "/vmlinuz"} {
			hp, err := chroot.ResolveIn(root, p)
			if err != nil {
				return nil, fmt.Errorf("find kernels: %w", err)
			}
			if fi, err := os.Lstat(hp); err == nil && fi.Mode().IsRegular() {
				k.Image, _ = filepath.Rel(root, hp)
				break
			}
		}
		if k.Image == "" {
			return nil, fmt.Errorf("kernel %s: neither /boot/vmlinuz-%s nor %s/%s/vmlinuz is a regular file of the image", v, v, imagekernel.ModulesDir, v)
		}
		for _, name := range []string{"initrd.img-" + v, "initramfs-" + v + ".img"} {
			if fi, err := os.Lstat(filepath.Join(boot, name)); err == nil && fi.Mode().IsRegular() {
				k.Initrd = filepath.Join(rel, name)
				break
			}
		}
		if k.Initrd == "" {
			return nil, fmt.Errorf("kernel %s has no initramfs in /boot: install initramfs-tools (or dracut) in the image so the disk can mount its root", v)
		}
		out = append(out, k)
	}
	return out, nil
}

// diskLayout is where everything lies on the disk, in bytes.
type diskLayout struct {
	Size      int64 // whole disk
	ESPStart  int64
	ESPSize   int64
	RootStart int64
	RootSize  int64
	RootType  string
	PartUUID  string // root partition's GPT UUID
}

// newLayout places a 1 MiB-aligned ESP and root on a disk of size bytes,
// or of a size that fits used bytes of tree with room to spare when size is
// 0. The disk's size is a whole number of MiB, as Azure's fixed VHDs need.
func newLayout(size, used, esp int64, arch, partUUID string) (diskLayout, error) {
	rootType, ok := rootTypes[arch]
	if !ok {
		return diskLayout{}, fmt.Errorf("no GPT root partition type known for architecture %q", arch)
	}
	// Room for the ESP, both GPT copies and their alignment.
	overhead := esp + 2*mib
	// ext4 metadata, reserved blocks and free space for first boot.
	need := used + used/4 + gib
	if size == 0 {
		size = roundUp(need+overhead, 256*mib)
	}
	size = roundUp(size, mib)
	if size-overhead < need {
		return diskLayout{}, fmt.Errorf("disk_size %dM is too small: the tree needs about %dM", size/mib, roundUp(need+overhead, mib)/mib)
	}
	l := diskLayout{Size: size, ESPStart: mib, ESPSize: esp, RootType: rootType, PartUUID: partUUID}
	l.RootStart = l.ESPStart + l.ESPSize
	// The backup GPT takes the last 33 sectors; end root on a MiB.
	l.RootSize = size - mib - l.RootStart
	return l, nil
}

// espFor sizes the ESP for the kernels and initramfs images it holds, with
// room for a third more, and at least espSize.
func espFor(root string, kernels []bootKernel) int64 {
	var sum int64
	for _, k := range kernels {
		for _, f := range []string{k.Image, k.Initrd} {
			if fi, err := os.Stat(filepath.Join(root, f)); err == nil {
				sum += fi.Size()
			}
		}
	}
	return max(espSize, roundUp(sum+sum/3+16*mib, mib))
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

// sfdiskScript is the partition table in sfdisk's input format.
func (l diskLayout) sfdiskScript() string {
	var b strings.Builder
	b.WriteString("label: gpt\nunit: sectors\nfirst-lba: 2048\n\n")
	fmt.Fprintf(&b, "start=%d, size=%d, type=%s, name=\"esp\"\n", l.ESPStart/512, l.ESPSize/512, espType)
	fmt.Fprintf(&b, "start=%d, size=%d, type=%s, uuid=%s, name=\"root\"\n", l.RootStart/512, l.RootSize/512, l.RootType, l.PartUUID)
	return b.String()
}

// loaderEntry is a Boot Loader Specification entry for kernel k.
func loaderEntry(title string, k bootKernel, partUUID, cmdline string) string {
	return fmt.Sprintf("title %s\nversion %s\nlinux /podvm/%s/vmlinuz\ninitrd /podvm/%s/initrd.img\noptions root=PARTUUID=%s rw %s\n",
		title, k.Version, k.Version, k.Version, partUUID, cmdline)
}

// loaderConf boots the newest kernel at once; the editor is off so that a
// console user cannot change the kernel command line.
func loaderConf(newest bootKernel) string {
	return fmt.Sprintf("default podvm-%s.conf\ntimeout 0\neditor no\n", newest.Version)
}

// fstab mounts the root by the same PARTUUID the boot entry names, and
// grows its file system to its partition at boot (systemd-growfs-root).
func fstab(partUUID string) string {
	return "# Written by podvm-rootfs for its disk image: the root by GPT partition UUID,\n" +
		"# its file system grown at boot to the partition, which systemd-repart grows\n" +
		"# to the end of the disk (" + growRootConf + ").\n" +
		"PARTUUID=" + partUUID + " / ext4 rw,errors=remount-ro,x-systemd.growfs 0 1\n"
}

// growRootConf is the systemd-repart definition that grows the root
// partition, the disk's last, to the end of the disk the VM is given: a
// cloud volume (cloud-api-adaptor's default root volume is 30 GiB) is
// larger than the image, and pod VMs pull container images onto it.
const growRootConf = "/usr/lib/repart.d/50-podvm-root.conf"

const growRootText = `# Written by podvm-rootfs: grow the root partition to the end of the disk
# at boot (systemd-repart.service); /etc/fstab's x-systemd.growfs then grows
# its file system.
[Partition]
Type=root
`

// repartBinary is what runs growRootConf at boot (Debian and Ubuntu:
// package systemd-repart).
const repartBinary = "/usr/bin/systemd-repart"

// osTitle is the tree's PRETTY_NAME, for the boot menu.
func osTitle(root string) string {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		if v := distro.ParseOSRelease(string(b)).PrettyName; v != "" {
			return v
		}
	}
	return "Linux"
}

// randomUUID is an RFC 4122 version 4 UUID.
func randomUUID() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", err
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:]), nil
}

// treeUsage is the space the tree's files take, hard links once.
func treeUsage(root string) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			total += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// diskBuild is the input of buildDisk.
type diskBuild struct {
	Root    string // the finished tree; nothing may be mounted below it
	Arch    string // Debian architecture
	Format  string // raw, qcow2 or vhd
	Size    int64  // 0: fit the tree
	Cmdline string // after root= and rw
	Output  string // the disk image to write
	// Bootloader is systemd-boot's EFI binary on the host, used when the
	// tree has none of its own.
	HostBootloaderDir string
	// Say reports progress.
	Say func(string)
}

// diskResult describes the disk written.
type diskResult struct {
	Layout  diskLayout
	Kernels []bootKernel
	// Bootloader is where systemd-boot came from.
	Bootloader string
}

// buildDisk writes a GPT disk with an ESP (systemd-boot, the tree's kernels
// and initramfs images, one boot entry each) and an ext4 root filled from
// the tree, all in user space: no loop device and no mount, so it works in
// sandboxes that allow neither. The image appears at Output only when
// complete.
func buildDisk(ctx context.Context, b diskBuild) (res diskResult, err error) {
	kernels, err := findBootKernels(b.Root)
	if err != nil {
		return res, err
	}
	res.Kernels = kernels
	names, ok := efiNames[b.Arch]
	if !ok {
		return res, fmt.Errorf("no UEFI boot loader known for architecture %q", b.Arch)
	}
	loader := ""
	if dir, err := chroot.ResolveIn(b.Root, "/usr/lib/systemd/boot/efi"); err == nil {
		if fi, err := os.Lstat(filepath.Join(dir, names[0])); err == nil && fi.Mode().IsRegular() {
			loader = filepath.Join(dir, names[0])
		}
	}
	if loader == "" {
		loader = filepath.Join(b.HostBootloaderDir, names[0])
		if _, err := os.Stat(loader); err != nil {
			return res, fmt.Errorf("no systemd-boot for %s: the image has no /usr/lib/systemd/boot/efi/%s and neither has this host (%s); install systemd-boot-efi in the image or on the host", b.Arch, names[0], b.HostBootloaderDir)
		}
	}
	res.Bootloader = loader

	used, err := treeUsage(b.Root)
	if err != nil {
		return res, fmt.Errorf("measure the tree: %w", err)
	}
	partUUID, err := randomUUID()
	if err != nil {
		return res, err
	}
	l, err := newLayout(b.Size, used, espFor(b.Root, kernels), b.Arch, partUUID)
	if err != nil {
		return res, err
	}
	res.Layout = l

	// The root mounts by PARTUUID also after boot, and grows to the disk.
	if err := replaceFile(b.Root, "/etc/fstab", []byte(fstab(partUUID)), 0o644); err != nil {
		return res, err
	}
	if err := replaceFile(b.Root, growRootConf, []byte(growRootText), 0o644); err != nil {
		return res, err
	}
	if _, err := os.Lstat(filepath.Join(b.Root, repartBinary)); err != nil {
		b.Say(fmt.Sprintf("warning: the image has no %s (Debian and Ubuntu: package systemd-repart): its root partition will not grow to a larger disk at boot", repartBinary))
	}

	// Named for this process: a killed build's multi-GB leftovers are
	// removed by the next.
	staging.RemoveStale(filepath.Dir(b.Output), ".podvm-disk-")
	work, err := os.MkdirTemp(filepath.Dir(b.Output), staging.Pattern(".podvm-disk-"))
	if err != nil {
		return res, fmt.Errorf("disk work directory: %w", err)
	}
	defer os.RemoveAll(work)

	raw := filepath.Join(work, "disk.raw")
	if err := makeSparse(raw, l.Size); err != nil {
		return res, err
	}
	b.Say(fmt.Sprintf("root: ext4 %q of %d MiB from the tree (%d MiB used), PARTUUID %s", rootLabel, l.RootSize/mib, used/mib, partUUID))
	// Made in place, in the partition: no separate image to copy in.
	// mke2fs's discard (the default) lets it mark the inode tables zeroed:
	// the VM's kernel then has none to zero on its first boot. It comes
	// before the partition table and the ESP, which an e2fsprogs that
	// discarded without the offset could not reach then.
	mk := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", rootLabel,
		"-E", fmt.Sprintf("root_owner=0:0,offset=%d", l.RootStart), "-d", b.Root, raw, fmt.Sprintf("%dk", l.RootSize/1024))
	if err := runHost(ctx, mk); err != nil {
		return res, fmt.Errorf("make the root file system: %w", err)
	}

	// Existing signatures in the new partitions stay: one is the root
	// file system just made.
	sf := exec.CommandContext(ctx, "sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", "--wipe-partitions", "never", raw)
	sf.Stdin = strings.NewReader(l.sfdiskScript())
	if err := runHost(ctx, sf); err != nil {
		return res, fmt.Errorf("partition the disk: %w", err)
	}

	b.Say(fmt.Sprintf("ESP: systemd-boot from %s, kernels %s", loader, kernelList(kernels)))
	esp := filepath.Join(work, "esp.img")
	if err := makeESP(ctx, esp, l, b.Root, loader, names[1], kernels, osTitle(b.Root), b.Cmdline); err != nil {
		return res, fmt.Errorf("fill the ESP: %w", err)
	}
	if err := copyInto(raw, l.ESPStart, esp); err != nil {
		return res, fmt.Errorf("write the ESP: %w", err)
	}
	os.Remove(esp)

	final := filepath.Join(work, "disk.out")
	switch b.Format {
	case formatRaw:
		final = raw
	case formatQcow2:
		err = runHost(ctx, exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, final))
	case formatVHD:
		// Azure takes fixed VHDs whose virtual size is a whole MiB;
		// force_size keeps qemu-img from rounding it to a CHS geometry.
		err = runHost(ctx, exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "vpc", "-o", "subformat=fixed,force_size=on", raw, final))
	default:
		err = fmt.Errorf("format %q is not a disk format", b.Format)
	}
	if err != nil {
		return res, fmt.Errorf("convert the disk to %s: %w", b.Format, err)
	}
	if err := os.Rename(final, b.Output); err != nil {
		return res, fmt.Errorf("move the disk into place: %w", err)
	}
	return res, nil
}

func kernelList(ks []bootKernel) string {
	var v []string
	for _, k := range ks {
		v = append(v, k.Version)
	}
	return strings.Join(v, ", ")
}

func makeSparse(name string, size int64) error {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// makeESP formats a FAT32 image and fills it with mtools.
func makeESP(ctx context.Context, img string, l diskLayout, root, loader, bootName string, kernels []bootKernel, title, cmdline string) error {
	if err := runHost(ctx, exec.CommandContext(ctx, "mkfs.vfat", "-F", "32", "-n", "ESP", "-C", img, strconv.FormatInt(l.ESPSize/1024, 10))); err != nil {
		return err
	}
	mtools := func(args ...string) error {
		cmd := exec.CommandContext(ctx, args[0], append([]string{"-i", img}, args[1:]...)...)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		return runHost(ctx, cmd)
	}
	dirs := []string{"mmd", "::/EFI", "::/EFI/BOOT", "::/EFI/systemd", "::/loader", "::/loader/entries", "::/podvm"}
	for _, k := range kernels {
		dirs = append(dirs, "::/podvm/"+k.Version)
	}
	if err := mtools(dirs...); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(filepath.Dir(img), "esp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	write := func(name, content string) (string, error) {
		p := filepath.Join(stage, name)
		return p, os.WriteFile(p, []byte(content), 0o644)
	}
	copies := [][2]string{{loader, "::/EFI/BOOT/" + bootName}, {loader, "::/EFI/systemd/" + filepath.Base(loader)}}
	p, err := write("loader.conf", loaderConf(kernels[len(kernels)-1]))
	if err != nil {
		return err
	}
	copies = append(copies, [2]string{p, "::/loader/loader.conf"})
	for _, k := range kernels {
		p, err := write("podvm-"+k.Version+".conf", loaderEntry(title, k, l.PartUUID, cmdline))
		if err != nil {
			return err
		}
		copies = append(copies,
			[2]string{p, "::/loader/entries/podvm-" + k.Version + ".conf"},
			[2]string{filepath.Join(root, k.Image), "::/podvm/" + k.Version + "/vmlinuz"},
			[2]string{filepath.Join(root, k.Initrd), "::/podvm/" + k.Version + "/initrd.img"})
	}
	for _, c := range copies {
		// -D o: overwrite, never ask.
		if err := mtools("mcopy", "-D", "o", c[0], c[1]); err != nil {
			return err
		}
	}
	return nil
}

// copyInto writes the file src into the file dst at offset off, skipping
// blocks of zeros so that a sparse dst stays sparse.
func copyInto(dst string, off int64, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, mib)
	zero := make([]byte, mib)
	pos := off
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, err := out.WriteAt(buf[:n], pos); err != nil {
				out.Close()
				return err
			}
		}
		pos += int64(n)
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	return out.Close()
}

// diskUsage is the space a file takes on the host's disk.
func diskUsage(name string) int64 {
	fi, err := os.Stat(name)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
