//go:build e2e

package e2e

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/example"
	"github.com/podvm-gpu/packer-plugin-podvm/gpustack"
	"github.com/podvm-gpu/packer-plugin-podvm/test/qemuaccel"
)

// The guest's users: podvm has passwordless sudo, podvm-pw a sudo that
// asks for a password it never gets.
const (
	guestUser   = "podvm"
	guestPWUser = "podvm-pw"
	// stageDir is a remote_folder outside /tmp, owned by guestUser.
	stageDir = "/var/tmp/podvm-e2e-stage"
	// stallFlag makes the guest's scp wrapper hold uploads while a
	// repository is being prepared; stallLog records each one it held.
	stallFlag = "/run/podvm-e2e-stall"
	stallLog  = "/var/tmp/podvm-e2e-stalled.log" // the SSH user writes it
	// The wrapper holds an upload until the test removes stallFlag, after
	// packer has exited: a provisioner that waited for the upload to
	// finish fails the test, however slow the host. stallSecs only bounds
	// the hold if the test dies.
	stallSecs = "600"
)

// baseScript turns the podvm-rootfs tree into a cloud-like base disk:
// two kernels (the archive's newest and the one before it, so the VM can
// run a kernel that a later step removes), sshd with host keys made at
// first boot, a DHCP client, the test's SSH key for both users, sudo with
// a 0077 umask (root-owned files the provisioner creates are unreadable to
// the SSH user unless it makes them readable), /tmp mounted noexec, and an
// scp wrapper that can hold uploads. Everything here is test-only.
const baseScript = `#!/bin/sh
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends initramfs-tools
apt-get install -y --no-install-recommends linux-image-amd64 systemd-boot-efi openssh-server sudo
new=$(dpkg-query -W -f='${Depends}' linux-image-amd64 | sed 's/[ ,(].*//')
old=$(apt-cache search --names-only '^linux-image-[0-9.]+\+deb[0-9.]+-amd64$' | cut -d' ' -f1 | sort -uV | grep -B1 -x "$new" | head -n 1)
[ -n "$old" ] && [ "$old" != "$new" ] || { echo "no kernel older than $new in the archive" >&2; exit 1; }
apt-get install -y --no-install-recommends "$old"

for u in ` + guestUser + ` ` + guestPWUser + `; do
	useradd --create-home --shell /bin/bash "$u"
	usermod -p '*' "$u"
	install -d -m 0700 -o "$u" -g "$u" "/home/$u/.ssh"
	printf '%s\n' "$PODVM_E2E_KEY" > "/home/$u/.ssh/authorized_keys"
	chown "$u:$u" "/home/$u/.ssh/authorized_keys"
	chmod 0600 "/home/$u/.ssh/authorized_keys"
done
cat > /etc/sudoers.d/podvm-e2e <<'EOF'
Defaults umask=0077
` + guestUser + ` ALL=(ALL) NOPASSWD: ALL
` + guestPWUser + ` ALL=(ALL) ALL
EOF
chmod 0440 /etc/sudoers.d/podvm-e2e
visudo -c >/dev/null
install -d -m 0700 -o ` + guestUser + ` -g ` + guestUser + ` ` + stageDir + `

# The builder scrubs SSH host keys from the image, as cloud images are.
cat > /etc/systemd/system/podvm-e2e-ssh-keygen.service <<'EOF'
[Unit]
Description=SSH host keys for the podvm e2e guest
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
EOF
systemctl enable podvm-e2e-ssh-keygen.service ssh.service

printf '[Match]\nName=e*\n\n[Network]\nDHCP=yes\n' > /etc/systemd/network/50-podvm-e2e.network
systemctl enable systemd-networkd.service
# The offline boot has no network device to wait for.
systemctl mask systemd-networkd-wait-online.service
echo 'nameserver 10.0.2.3' > /etc/resolv.conf

mkdir -p /etc/systemd/system/tmp.mount.d
printf '[Mount]\nOptions=mode=1777,strictatime,nosuid,nodev,noexec,size=50%%%%,nr_inodes=1m\n' > /etc/systemd/system/tmp.mount.d/podvm-e2e-noexec.conf

cat > /usr/local/bin/scp <<'EOF'
#!/bin/sh
# podvm e2e, test only: while ` + stallFlag + ` exists, an upload that starts
# while a repository is being prepared waits until the flag is gone, so
# that the test can interrupt packer in the middle of it.
if [ "${1:-}" = -vt ] && [ -e ` + stallFlag + ` ] && [ -d /opt/local-packages.podvm-new ]; then
	echo "held $$ $*" >> ` + stallLog + `
	i=0
	while [ -e ` + stallFlag + ` ] && [ "$i" -lt ` + stallSecs + ` ]; do
		sleep 1
		i=$((i + 1))
	done
	echo "released $$" >> ` + stallLog + `
fi
exec /usr/bin/scp "$@"
EOF
chmod 0755 /usr/local/bin/scp
`

// TestCloudPathE2E rehearses the cloud path (example/aws, example/azure)
// on a VM: the podvm-rootfs builder makes a Debian trixie base disk,
// QEMU boots it with user networking and SSH forwarded to 127.0.0.1, and
// the real packer runs podvm-gpu through Packer's null builder and SSH
// communicator as a non-root user with sudo, with the cloud templates'
// provisioner block verbatim. The VM runs the older of the image's two
// kernels; the build removes it (the state after a kernel upgrade and
// autoremove), so the provisioner must target the image's remaining
// kernel, not uname -r. The result then boots again with no network
// and passes the boot checks for that kernel.
//
// Under TCG (KVM cannot run Debian 13's kernel on this machine kind) a
// DKMS build would take far too long, so the node profile
// ENABLE_NVIDIA_GPU=no LOCAL_REPO=yes runs: the kernel packages are
// downloaded in the guest, copied to the host, indexed and signed there,
// uploaded back and swapped into place, then self-tested. Where KVM runs
// the guest kernel the GPU stack is installed instead (DKMS, the stand-in
// toolkit mirror); that branch has not run on this machine kind.
//
// Along the way: a sudo that would ask for a password fails fast (-n), a
// SIGINT while the repository is uploading leaves nothing half-done in
// the guest or on the host, /tmp is noexec and sudo's umask is 0077.
//
//	go test -tags e2e -run TestCloudPathE2E -v -timeout 40m ./test/e2e/
func TestCloudPathE2E(t *testing.T) {
	testStart := time.Now()
	env := setupBuilderEnv(t)
	root := builderRepoRoot(t)
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install qemu-system-x86 and qemu-utils (make deps)", tool)
		}
	}
	block, err := example.ProvisionerBlock(filepath.Join(root, "example/aws/podvm.pkr.hcl"), "podvm-gpu")
	must(t, err)
	if az, err := example.ProvisionerBlock(filepath.Join(root, "example/azure/podvm.pkr.hcl"), "podvm-gpu"); err != nil || az != block {
		t.Fatalf("example/azure's podvm-gpu block is not example/aws's (%v):\n%s", err, az)
	}

	work := t.TempDir()
	signer, keyFile, authorized := newTestKey(t, work)
	base := buildBaseDisk(t, env, work, authorized)

	vm := bootGuest(t, work, base, signer)
	running := strings.TrimSpace(vm.must(t, "uname -r"))
	if running != base.old {
		t.Fatalf("the guest runs %s, want the older kernel %s", running, base.old)
	}
	if opts := vm.must(t, "findmnt -n -o OPTIONS /tmp"); !strings.Contains(opts, "noexec") {
		t.Fatalf("/tmp is not noexec in the guest: %s", opts)
	}
	t.Logf("guest up under %s after %s: kernel %s running, image kernels %s %s; /tmp noexec",
		vm.accel, vm.booted.Round(time.Second), running, base.old, base.new)

	// The variant: the GPU stack needs a DKMS build, which TCG cannot
	// afford. (On this machine kind KVM cannot run the guest kernel, so
	// the GPU variant has not run here.)
	gpu := vm.accel == "kvm"
	variant := "node profile (ENABLE_NVIDIA_GPU=no LOCAL_REPO=yes)"
	settings := []string{"ENABLE_NVIDIA_GPU=no", "LOCAL_REPO=yes"}
	if gpu {
		cache := podvmCache(t)
		m := startToolkitMirror(t, root, cache)
		// QEMU's user network takes the guest's 10.0.2.2 to the host's
		// loopback, where the stand-in toolkit mirror listens.
		m.URL = strings.Replace(m.URL, "127.0.0.1", "10.0.2.2", 1)
		settings = e2eSettings(m)
		variant = "GPU stack (ENABLE_NVIDIA_GPU=yes, DKMS for the image kernel)"
	}
	t.Logf("variant: %s, guest under %s", variant, vm.accel)

	hostTmp := filepath.Join(work, "host-tmp")
	must(t, os.MkdirAll(hostTmp, 0o755))
	sshRun := sshRunner{env: env, port: vm.port, keyFile: keyFile, hostTmp: hostTmp}

	t.Run("sudo that needs -n", func(t *testing.T) {
		testSudoNeedsN(t, sshRun, block, settings)
	})
	t.Run("SIGINT during the repository upload", func(t *testing.T) {
		testInterruptedUpload(t, sshRun, vm, base)
	})
	if t.Failed() {
		t.FailNow()
	}

	arts := filepath.Join(work, "artifacts")
	t.Run("provision over SSH", func(t *testing.T) {
		provisionOverSSH(t, sshRun, vm, block, settings, base, arts, gpu)
	})
	if t.Failed() {
		t.FailNow()
	}
	spec := guestSpec{Expose: "/run/nvidia/local-packages"}
	if gpu {
		// What the boot check looks for, read from the guest as imageSpec
		// reads it from a tree.
		spec.Module = "nvidia-current"
		gates := vm.must(t, "ls /etc/systemd/system/*.d/podvm-gpu-gate.conf")
		for _, g := range strings.Fields(gates) {
			spec.GPUUnits = append(spec.GPUUnits, strings.TrimSuffix(filepath.Base(filepath.Dir(g)), ".d"))
		}
	}
	vm.powerOff(t)

	t.Run("offline boot", func(t *testing.T) {
		sources := configMapSources(t, arts)
		spec.Sources = sources
		if !strings.Contains(sources, "URIs: file://"+spec.Expose+"\n") {
			t.Errorf("the ConfigMap's sources do not point at %s:\n%s", spec.Expose, sources)
		}
		res := bootCheck(t, base.disk, spec)
		assertBoot(t, res, spec)
		if !slices.ContainsFunc(res.Log, func(l string) bool { return l == "kernel "+base.new }) {
			t.Errorf("the offline boot did not run %s: %v", base.new, res.Log)
		}
	})
	t.Logf("TestCloudPathE2E: variant %s under %s, %s in all", variant, vm.accel, time.Since(testStart).Round(time.Second))
}

// baseDisk is the base disk and what the test needs to know of it.
type baseDisk struct {
	disk, tree string
	old, new   string // kernels, older first
	partUUID   string
}

// buildBaseDisk builds the base disk with the podvm-rootfs builder. Its
// base tree is example/local's (same suite, variant and include), so the
// builder's cache serves both.
func buildBaseDisk(t *testing.T, env *builderEnv, work, authorized string) baseDisk {
	t.Helper()
	tree, disk := filepath.Join(work, "base"), filepath.Join(work, "base.qcow2")
	script := filepath.Join(work, "base.sh")
	must(t, os.WriteFile(script, []byte(baseScript), 0o755))
	tpl := fmt.Sprintf(`
source "podvm-rootfs" "base" {
  suite            = "trixie"
  variant          = "minbase"
  components       = ["main"]
  include          = ["ca-certificates", "systemd-sysv", "kmod"]
  output_directory = %q
  format           = "qcow2"
  output_image     = %q
  disk_size        = "3G"
}

build {
  sources = ["source.podvm-rootfs.base"]
  provisioner "shell" {
    environment_vars = [%q]
    script           = %q
  }
}
`, tree, disk, "PODVM_E2E_KEY="+authorized, script)
	r := env.build(t, tpl)
	if r.err != nil {
		r.dump(t)
		t.Fatalf("building the base disk: %v", r.err)
	}
	logDisk(t, disk)
	kernels := dirNames(t, filepath.Join(tree, "usr/lib/modules"))
	gpustack.SortKernels(kernels)
	if len(kernels) != 2 {
		t.Fatalf("base image kernels %v, want two", kernels)
	}
	fstab, err := os.ReadFile(filepath.Join(tree, "etc/fstab"))
	must(t, err)
	m := regexp.MustCompile(`(?m)^PARTUUID=(\S+)\s+/\s`).FindSubmatch(fstab)
	if m == nil {
		t.Fatalf("no root PARTUUID in the base tree's fstab:\n%s", fstab)
	}
	return baseDisk{disk: disk, tree: tree, old: kernels[0], new: kernels[1], partUUID: string(m[1])}
}

// newTestKey makes an Ed25519 key for this test only: the signer, the
// private key file packer reads and the authorized_keys line.
func newTestKey(t *testing.T, dir string) (ssh.Signer, string, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	must(t, err)
	blk, err := ssh.MarshalPrivateKey(priv, "podvm e2e test key")
	must(t, err)
	file := filepath.Join(dir, "id_ed25519")
	must(t, os.WriteFile(file, pem.EncodeToMemory(blk), 0o600))
	return signer, file, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " podvm-e2e"
}

// guest is a running QEMU VM with SSH forwarded to 127.0.0.1:port.
type guest struct {
	cmd     *exec.Cmd
	done    chan error
	stderr  *builderOutput
	console string
	accel   string
	port    int
	booted  time.Duration
	client  *ssh.ClientConfig
}

// bootGuest boots the base disk in place (the build changes it) with the
// older kernel, loaded by QEMU directly, and waits for SSH. KVM is tried
// first, as in bootCheck.
func bootGuest(t *testing.T, work string, base baseDisk, signer ssh.Signer) *guest {
	t.Helper()
	choice := qemuaccel.Choose()
	t.Logf("accelerator: %s", choice)
	accels := []string{choice.Accel}
	if choice.Accel == qemuaccel.KVM {
		accels = append(accels, qemuaccel.TCG)
	}
	for i := 0; i < len(accels); i++ {
		accel := accels[i]
		start := time.Now()
		g := startGuest(t, work, base, signer, accel)
		err := g.waitSSH(6 * time.Minute)
		if err == nil {
			t.Cleanup(func() { g.kill() })
			return g
		}
		g.kill()
		// Any failure under KVM before the guest kernel's first line is
		// KVM's, not the image's.
		if g.accel == qemuaccel.KVM && (!qemuaccel.SignOfLife(readFile(g.console)) || strings.Contains(g.stderr.String(), "KVM internal error")) {
			t.Logf("KVM failed before the guest kernel ran (%v, after %s): booting again under TCG; qemu said:\n%s",
				err, time.Since(start).Round(time.Second), tail(g.stderr.String(), 5))
			continue
		}
		if strings.Contains(readFile(g.console), "Kernel panic") && !strings.HasSuffix(accels[len(accels)-1], "-again") {
			// Seen once under TCG on a loaded host, early in boot;
			// the disk is untouched by then. One more try, said out loud.
			t.Logf("the guest kernel panicked under %s before SSH came up; booting once more. console:\n%s", accel, tail(readFile(g.console), 30))
			accels = append(accels, accel+"-again")
			continue
		}
		t.Logf("console (last lines):\n%s", tail(readFile(g.console), 60))
		t.Fatalf("the guest (%s) never answered on SSH: %v\n%s", accel, err, g.stderr.String())
	}
	t.Fatal("unreachable")
	return nil
}

func startGuest(t *testing.T, work string, base baseDisk, signer ssh.Signer, accel string) *guest {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	g := &guest{
		done:    make(chan error, 1),
		stderr:  &builderOutput{},
		console: filepath.Join(work, "guest-"+accel+"-console.log"),
		accel:   strings.TrimSuffix(accel, "-again"),
		port:    port,
		client: &ssh.ClientConfig{
			User:            guestUser,
			Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a VM of this test's, keys made at its first boot
			Timeout:         15 * time.Second,
		},
	}
	boot := filepath.Join(base.tree, "boot")
	args := []string{"-machine", "q35", "-m", "2048", "-nographic",
		"-nic", fmt.Sprintf("user,model=virtio-net-pci,hostfwd=tcp:127.0.0.1:%d-:22", port),
		"-drive", "file=" + base.disk + ",format=qcow2,if=virtio",
		// The older kernel, whatever the disk's boot loader would pick.
		"-kernel", filepath.Join(boot, "vmlinuz-"+base.old),
		"-initrd", filepath.Join(boot, "initrd.img-"+base.old),
		"-append", "root=PARTUUID=" + base.partUUID + " rw console=ttyS0,115200n8",
		"-serial", "file:" + g.console, "-monitor", "none", "-display", "none"}
	// One vCPU under TCG: with two, the guest kernel's live code patching
	// raced under multi-threaded TCG here (an int3 Oops at boot), and the
	// two host cores are shared anyway.
	args = append(args, qemuaccel.Args(g.accel, 2, 1)...)
	g.cmd = exec.Command("qemu-system-x86_64", args...)
	g.cmd.Stdout, g.cmd.Stderr = g.stderr, g.stderr
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, g.cmd.Start())
	go func() { g.done <- g.cmd.Wait() }()
	return g
}

// waitSSH waits until the guest runs a command over SSH.
func (g *guest) waitSSH(limit time.Duration) error {
	start := time.Now()
	deadline := time.After(limit)
	var last error
	for {
		if _, err := g.run("true"); err == nil {
			g.booted = time.Since(start)
			return nil
		} else {
			last = err
		}
		if g.accel == qemuaccel.KVM {
			if strings.Contains(g.stderr.String(), "KVM internal error") {
				return errors.New("KVM internal error")
			}
			if time.Since(start) > 3*time.Minute && !qemuaccel.SignOfLife(readFile(g.console)) {
				return errors.New("no guest kernel output under KVM after 3 minutes")
			}
		}
		if strings.Contains(readFile(g.console), "Kernel panic - not syncing") {
			return errors.New("the guest kernel panicked")
		}
		select {
		case err := <-g.done:
			g.done <- err
			return fmt.Errorf("qemu exited: %v", err)
		case <-deadline:
			return fmt.Errorf("no SSH after %s: %v", limit, last)
		case <-time.After(3 * time.Second):
		}
	}
}

// run runs a command in the guest as guestUser.
func (g *guest) run(cmd string) (string, error) {
	c, err := g.dial()
	if err != nil {
		return "", err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	return string(out), err
}

// dial connects to the guest's sshd. A handshake that times out is tried
// twice more: a TCG guest on a host busy with other builds can take longer
// than the deadline for its key exchange, which is not what any test here
// checks. A refused or reset connection (sshd not up yet) fails at once.
func (g *guest) dial() (*ssh.Client, error) {
	// QEMU's forwarder accepts at once, guest or not: the handshake
	// needs a deadline of its own, which ssh.Dial's Timeout is not.
	addr := fmt.Sprintf("127.0.0.1:%d", g.port)
	var err error
	for try := 0; try < 3; try++ {
		var conn net.Conn
		conn, err = net.DialTimeout("tcp", addr, g.client.Timeout)
		if err != nil {
			return nil, err
		}
		conn.SetDeadline(time.Now().Add(g.client.Timeout))
		sc, chans, reqs, herr := ssh.NewClientConn(conn, addr, g.client)
		if herr == nil {
			conn.SetDeadline(time.Time{})
			return ssh.NewClient(sc, chans, reqs), nil
		}
		conn.Close()
		err = herr
		var ne net.Error
		if !errors.As(herr, &ne) || !ne.Timeout() {
			return nil, err
		}
	}
	return nil, fmt.Errorf("SSH handshake with the guest timed out 3 times (%s each): %w", g.client.Timeout, err)
}

func (g *guest) must(t *testing.T, cmd string) string {
	t.Helper()
	out, err := g.run(cmd)
	if err != nil {
		t.Fatalf("in the guest: %s: %v\n%s", cmd, err, out)
	}
	return out
}

// powerOff shuts the guest down cleanly and waits for QEMU to exit.
func (g *guest) powerOff(t *testing.T) {
	t.Helper()
	start := time.Now()
	g.run("sudo -n systemctl poweroff") // the connection drops as it goes down
	select {
	case err := <-g.done:
		g.done <- err
		if err != nil {
			t.Fatalf("qemu: %v\n%s", err, g.stderr.String())
		}
		t.Logf("guest powered off in %s", time.Since(start).Round(time.Second))
	case <-time.After(3 * time.Minute):
		t.Logf("console (last lines):\n%s", tail(readFile(g.console), 40))
		g.kill()
		t.Fatal("the guest did not power off within 3 minutes")
	}
}

func (g *guest) kill() {
	select {
	case err := <-g.done:
		g.done <- err
	default:
		g.cmd.Process.Kill()
		g.done <- <-g.done
	}
}

// sshRunner runs packer builds against the guest with the null builder.
type sshRunner struct {
	env     *builderEnv
	port    int
	keyFile string
	hostTmp string // TMPDIR of packer and its plugins
}

// template is a null-builder build over SSH as user, with pre (other
// provisioner blocks) before the podvm-gpu block.
func (s sshRunner) template(user, pre, block string) string {
	return fmt.Sprintf(`
variable "artifacts_directory" {
  type = string
}

# The cloud templates' podvm-gpu block names it; the rehearsal builds GPU
# base images.
variable "podvm_binaries" {
  type    = string
  default = ""
}

source "null" "vm" {
  communicator         = "ssh"
  ssh_host             = "127.0.0.1"
  ssh_port             = %d
  ssh_username         = %q
  ssh_private_key_file = %q
  ssh_timeout          = "2m"
}

build {
  sources = ["source.null.vm"]
%s
  %s
}
`, s.port, user, s.keyFile, pre, block)
}

// start starts packer build; settings go through the environment, as
// the cloud templates expect.
func (s sshRunner) start(t *testing.T, tpl, arts string, settings []string) *builderRun {
	t.Helper()
	extra := append([]string{"TMPDIR=" + s.hostTmp}, settings...)
	return s.env.startBuildEnv(t, tpl, extra, "-var", "artifacts_directory="+arts)
}

// testSudoNeedsN: a user whose sudo wants a password gets a quick, clear
// failure from execute_command's sudo -n, not a build that hangs at a
// prompt nobody sees.
func testSudoNeedsN(t *testing.T, s sshRunner, block string, settings []string) {
	arts := filepath.Join(t.TempDir(), "artifacts")
	start := time.Now()
	r := s.start(t, s.template(guestPWUser, "", block), arts, settings)
	done := make(chan struct{})
	go func() { r.wait(t, start); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-done
		r.dump(t)
		t.Fatal("packer still running 3 minutes in: sudo waits for a password")
	}
	if r.err == nil {
		r.dump(t)
		t.Fatal("the build succeeded although sudo needs a password")
	}
	if out := r.output.String(); !strings.Contains(out, "a password is required") {
		r.dump(t)
		t.Errorf("the failure does not say that sudo wants a password")
	}
	t.Logf("sudo without NOPASSWD: failed in %s with sudo's own message", time.Since(start).Round(time.Second))
}

// testInterruptedUpload interrupts packer (SIGINT to its process group,
// as Ctrl-C does) while the guest holds an upload of the repository's
// index files, and checks that nothing is left half-done: no repository
// or work directory in the guest, no staged file in remote_folder, no
// temporary files on the host, and that packer exits promptly. It runs a
// small bake (headers only, no closure) for every image kernel, with
// uname -r one of them: the targets must be the image's kernels.
func testInterruptedUpload(t *testing.T, s sshRunner, vm *guest, base baseDisk) {
	arts := filepath.Join(t.TempDir(), "artifacts")
	block := `provisioner "podvm-gpu" {
    execute_command = "sudo -n sh -c {{.Command}}"
    remote_folder   = "` + stageDir + `"
    output_dir      = var.artifacts_directory
  }`
	// No holds: they come before the bake and would stay on the older
	// kernel, which the rehearsal after this one removes.
	settings := []string{"ENABLE_NVIDIA_GPU=no", "LOCAL_REPO=yes", "PODVM_KERNELS=all",
		"LOCAL_REPO_CLOSURE=none", "LOCAL_REPO_PACKAGES=linux-headers-{kernel}", "PODVM_HOLD_PACKAGES=no"}
	vm.must(t, "sudo -n touch "+stallFlag)
	defer vm.run("sudo -n rm -f " + stallFlag)

	start := time.Now()
	r := s.start(t, s.template(guestUser, "", block), arts, settings)
	done := make(chan struct{})
	go func() { r.wait(t, start); close(done) }()
	stop := func(msg string) {
		t.Helper()
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-done
		r.dump(t)
		t.Fatal(msg)
	}
	// Wait for the signing step, then for the guest to say it holds an
	// upload; a build that ends first has failed.
	held := ""
	for deadline := time.Now().Add(10 * time.Minute); held == ""; {
		select {
		case <-done:
			r.dump(t)
			t.Fatalf("the build ended before an upload was held: %v", r.err)
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			stop("no upload was held in the guest within 10 minutes")
		}
		if strings.Contains(r.output.String(), "indexing and signing on the build host") {
			held, _ = vm.run("cat " + stallLog + " 2>/dev/null")
		}
	}
	t.Logf("guest holds an upload: %s", strings.TrimSpace(held))
	interrupted := time.Now()
	must(t, syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT))
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		stop("packer still running 2 minutes after SIGINT: it waits for the held upload")
	}
	took := time.Since(interrupted)
	t.Logf("packer exited %s after SIGINT", took.Round(100*time.Millisecond))
	if r.err == nil {
		t.Error("an interrupted build exited 0")
	}
	if took > 20*time.Second {
		t.Errorf("packer took %s to exit after SIGINT: it waited for the held upload", took.Round(time.Second))
	}
	out := r.output.String()
	m := regexp.MustCompile(`podvm-gpu: target [^\n]*, kernels ([^\n]*)`).FindStringSubmatch(out)
	if m == nil || strings.TrimSpace(m[1]) != base.old+" "+base.new {
		t.Errorf("targets %v, want the image's kernels %s %s (uname -r %s among them)", m, base.old, base.new, base.old)
	} else {
		t.Logf("running kernel %s is one of the image's: targets %s", base.old, strings.TrimSpace(m[1]))
	}

	// Release the held upload and wait until the guest has, so that
	// whatever it would write has been written.
	vm.must(t, "sudo -n rm -f "+stallFlag)
	for i := 0; i < 60; i++ {
		if l, _ := vm.run("cat " + stallLog); strings.Contains(l, "released") {
			break
		}
		time.Sleep(time.Second)
	}
	time.Sleep(3 * time.Second)
	// Packer kills its plugins as soon as an interrupted build returns, and
	// the SSH connection with them: no command can run in the guest after
	// the SIGINT. The repository is never half-written (it is swapped
	// into place whole, and this bake never got there); its work
	// directory beside it stays until the next run, which removes it
	// first (the rehearsal below runs next and checks it is gone).
	left := vm.must(t, "sudo -n sh -c 'ls -d /opt/local-packages /opt/local-packages.podvm-old "+stageDir+"/* /tmp/podvm-gpu.* /usr/share/keyrings/podvm-local-packages.gpg 2>/dev/null; true'")
	if strings.TrimSpace(left) != "" {
		t.Errorf("left in the guest after SIGINT:\n%s", left)
	}
	if work := vm.must(t, "ls -d /opt/local-packages.podvm-new 2>/dev/null; true"); strings.TrimSpace(work) != "" {
		t.Logf("the bake's work directory %s stays until the next run", strings.TrimSpace(work))
	}
	// The host's copy of the .debs goes with the killed plugin process
	// (its watcher removes it within moments).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ents, err := os.ReadDir(s.hostTmp)
		must(t, err)
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, e := range ents {
				t.Errorf("left on the host after SIGINT: %s", filepath.Join(s.hostTmp, e.Name()))
			}
			break
		}
	}
	if ents, _ := os.ReadDir(arts); len(ents) > 0 {
		t.Errorf("host artefacts written by an interrupted build: %v", ents)
	}
	if t.Failed() {
		r.dump(t)
	}
}

// provisionOverSSH is the rehearsal itself: the running kernel is purged
// (the state after a kernel upgrade and autoremove), then the cloud
// templates' podvm-gpu block runs with the settings in the environment.
func provisionOverSSH(t *testing.T, s sshRunner, vm *guest, block string, settings []string, base baseDisk, arts string, gpu bool) {
	pre := `
  # A kernel upgrade's autoremove, in the same build: the kernel that runs
  # leaves the image. sh runs the script, since /tmp is noexec.
  provisioner "shell" {
    execute_command = "sudo -n sh '{{ .Path }}'"
    inline = [
      "set -e",
      "echo 'linux-base linux-base/removing-running-kernel boolean false' | debconf-set-selections",
      "DEBIAN_FRONTEND=noninteractive apt-get purge -y linux-image-$(uname -r)",
    ]
  }
`
	start := time.Now()
	r := s.start(t, s.template(guestUser, pre, block), arts, settings)
	r.wait(t, start)
	if r.err != nil {
		r.dump(t)
		t.Fatalf("packer build over SSH: %v", r.err)
	}
	out := r.output.String()
	m := regexp.MustCompile(`podvm-gpu: target [^\n]*, kernels ([^\n]*)`).FindStringSubmatch(out)
	if m == nil || strings.TrimSpace(m[1]) != base.new {
		t.Errorf("targets %v, want %s: the image's only kernel, not the running %s", m, base.new, base.old)
	}
	running := strings.TrimSpace(vm.must(t, "uname -r"))
	if installed := vm.must(t, "dpkg-query -W -f='${db:Status-Status}' linux-image-"+running+" 2>/dev/null; true"); installed == "installed" {
		t.Errorf("the running kernel %s is still installed", running)
	}
	t.Logf("running kernel %s no longer in the image; podvm-gpu targeted %s", running, base.new)

	var man bake.Manifest
	b, err := os.ReadFile(filepath.Join(arts, bake.ManifestFile))
	must(t, err)
	must(t, json.Unmarshal(b, &man))
	if !slices.Equal(man.Kernels, []string{base.new}) || man.Repo == nil || (man.GPU != nil) != gpu {
		t.Errorf("manifest: kernels %v, repo %v, gpu %v", man.Kernels, man.Repo != nil, man.GPU != nil)
	}
	names := map[string]bool{}
	if man.Repo != nil {
		for _, p := range man.Repo.Packages {
			names[p.Name] = true
		}
	}
	for _, want := range []string{"linux-headers-" + base.new, "linux-image-" + base.new} {
		if !names[want] {
			t.Errorf("the repository lacks %s", want)
		}
	}
	inGuest := vm.must(t, "cat /opt/local-packages/manifest.json")
	if !bytes.Equal(bytes.TrimSpace([]byte(inGuest)), bytes.TrimSpace(b)) {
		t.Error("manifest.json differs between the guest and the host artefacts")
	}
	// Root-owned, world-readable, nothing beside it, nothing staged.
	if bad := vm.must(t, "sudo -n find /opt/local-packages ! -user root -o ! -group root -o -type f ! -perm 0644 -o -type d ! -perm 0755"); strings.TrimSpace(bad) != "" {
		t.Errorf("repository files not root:root 0644/0755:\n%s", bad)
	}
	if left := vm.must(t, "ls -d /opt/local-packages.* /tmp/podvm-gpu.* "+stageDir+"/* 2>/dev/null; true"); strings.TrimSpace(left) != "" {
		t.Errorf("left in the guest:\n%s", left)
	}
	if ents, _ := os.ReadDir(s.hostTmp); len(ents) > 0 {
		t.Errorf("left in the host's TMPDIR: %v", ents)
	}
	t.Logf("%d packages baked for %s (%s)", len(names), base.new, time.Since(start).Round(time.Second))
}
