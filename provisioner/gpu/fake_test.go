package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/podvm-gpu/packer-plugin-podvm/aptrepo"
	"github.com/podvm-gpu/packer-plugin-podvm/bake"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel"
	"github.com/podvm-gpu/packer-plugin-podvm/imagestep"
)

// fakeImage describes the image the fake communicator pretends to be.
type fakeImage struct {
	osRelease string
	arch      string
	kernels   []string
	sources   map[string]string // apt source files by path
	debs      map[string][]byte // what apt "downloads" into the new repo dir
	installed string            // installed packages, one "status<TAB>name<TAB>version<TAB>arch" per line
	files     map[string][]byte // other files Download reads, by path
	probe     string            // what the driver source probe prints
}

// moduleCert is the module signing certificate the fake image's signing
// step "left": a fixed test certificate, no key anywhere.
func moduleCert() []byte {
	b, err := os.ReadFile("testdata/module-signing.der")
	if err != nil {
		panic(err)
	}
	return b
}

func debian13() *fakeImage {
	return &fakeImage{
		osRelease: "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nVERSION=\"13 (trixie)\"\nVERSION_CODENAME=trixie\nID=debian\n",
		arch:      "amd64",
		kernels:   []string{"6.12.57+deb13-amd64"},
		files: map[string][]byte{"/usr/share/podvm-gpu/module-signing.der": moduleCert(),
			"/usr/share/podvm-gpu/module-signatures.tsv": []byte("6.12.57+deb13-amd64\t/usr/lib/modules/6.12.57+deb13-amd64/updates/dkms/nvidia-current.ko.xz\tpodvm-gpu ephemeral module signing key\t5A:0F\tsha256\n")},
		sources: map[string]string{
			"/etc/apt/sources.list": "deb http://mirror.example/debian trixie main\n" +
				"deb http://mirror.example/debian trixie-updates main\n" +
				"deb http://security.mirror.example/debian-security trixie-security main\n",
		},
		debs: map[string][]byte{
			"linux-headers-6.12.57+deb13-amd64_6.12.57-1_amd64.deb": []byte("deb1"),
			"linux-headers-6.12.57+deb13-common_6.12.57-1_all.deb":  []byte("deb2"),
			"linux-image-6.12.57+deb13-amd64_6.12.57-1_amd64.deb":   []byte("deb3"),
			"linux-kbuild-6.12.57+deb13_6.12.57-1_amd64.deb":        []byte("deb4"),
		},
		installed: "installed\tnvidia-smi\t550.163.01-2\tamd64\n" +
			"installed\tnvidia-open-kernel-dkms\t550.163.01-2\tamd64\n" +
			"config-files\tnvidia-legacy-check\t470.1-1\tamd64\n" +
			"installed\tlibcuda1\t550.163.01-2\tamd64\n",
	}
}

func ubuntu2404() *fakeImage {
	return &fakeImage{
		osRelease: "PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n",
		arch:      "amd64",
		kernels:   []string{"6.8.0-1028-azure"},
		probe:     "podvm-gpu: the archive has no linux-modules-nvidia-570-server-open-6.8.0-1028-azure for kernel 6.8.0-1028-azure: DKMS\ndistro\n",
		files: map[string][]byte{"/usr/share/podvm-gpu/module-signing.der": moduleCert(),
			"/usr/share/podvm-gpu/module-signatures.tsv": []byte("6.8.0-1028-azure\t/usr/lib/modules/6.8.0-1028-azure/updates/dkms/nvidia.ko.zst\tpodvm-gpu ephemeral module signing key\t5A:0F\tsha256\n")},
		sources: map[string]string{
			"/etc/apt/sources.list.d/ubuntu.sources": "Types: deb\nURIs: http://ubuntu.mirror.example/ubuntu/\nSuites: noble noble-updates noble-backports\n" +
				"Components: main restricted universe multiverse\nSigned-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n\n" +
				"Types: deb\nURIs: http://ubuntu.mirror.example/ubuntu/\nSuites: noble-security\n" +
				"Components: main universe\nSigned-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n",
		},
		debs: map[string][]byte{
			"linux-azure-headers-6.8.0-1028_6.8.0-1028.33_all.deb":   []byte("deb1"),
			"linux-headers-6.8.0-1028-azure_6.8.0-1028.33_amd64.deb": []byte("deb2"),
			"linux-image-6.8.0-1028-azure_6.8.0-1028.33_amd64.deb":   []byte("deb3"),
			"linux-modules-6.8.0-1028-azure_6.8.0-1028.33_amd64.deb": []byte("deb4"),
		},
		installed: "installed\tnvidia-headless-570-server-open\t570.195.03-0ubuntu0.24.04.1\tamd64\n" +
			"installed\tnvidia-utils-570-server\t570.195.03-0ubuntu0.24.04.1\tamd64\n" +
			"installed\tlibnvidia-compute-570-server\t570.195.03-0ubuntu0.24.04.1\tamd64\n",
	}
}

// fakeComm is a recording communicator: it answers the detection commands
// from a fakeImage, records every command, upload and download in order,
// and can fail or hang a chosen command.
type fakeComm struct {
	img *fakeImage

	mu      sync.Mutex
	log     []string
	cmds    []string // inner commands, in order
	uploads map[string][]byte

	failAt     int // 1-based command number to fail; 0: none
	failStatus int
	failOutput string
	// respond overrides the answer to a command (by inner command); return
	// ok=false for the default.
	respond func(n int, inner string) (stdout string, status int, ok bool)
	hangAt  int // command number that never exits, ignoring ctx
	// uploadFailures makes the first n uploads fail.
	uploadFailures int
	// stdin is what each command read on its input, by command number.
	stdin map[int][]byte
}

func newFakeComm(img *fakeImage) *fakeComm {
	return &fakeComm{img: img, uploads: map[string][]byte{}}
}

func (c *fakeComm) record(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, s)
}

// unwrap undoes execute_command templates of the form "... sh -c '<quoted>'"
// and the env exports, giving the command as the provisioner wrote it.
func unwrap(cmd string) string {
	i := strings.Index(cmd, "sh -c ")
	if i < 0 {
		return cmd
	}
	rest := cmd[i+len("sh -c "):]
	var b strings.Builder
	for i := 0; i < len(rest); {
		switch rest[i] {
		case '\'':
			j := strings.IndexByte(rest[i+1:], '\'')
			if j < 0 {
				return cmd
			}
			b.WriteString(rest[i+1 : i+1+j])
			i += j + 2
		case '\\':
			if i+1 < len(rest) {
				b.WriteByte(rest[i+1])
			}
			i += 2
		default:
			b.WriteByte(rest[i])
			i++
		}
	}
	inner := b.String()
	if strings.HasPrefix(inner, "export ") {
		if _, after, ok := strings.Cut(inner, "; "); ok {
			inner = after
		}
	}
	return inner
}

func (c *fakeComm) Start(ctx context.Context, rc *packersdk.RemoteCmd) error {
	inner := unwrap(rc.Command)
	c.mu.Lock()
	c.log = append(c.log, "run: "+rc.Command)
	c.cmds = append(c.cmds, inner)
	n := len(c.cmds)
	c.mu.Unlock()

	if rc.Stdin != nil {
		in, err := io.ReadAll(rc.Stdin)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if c.stdin == nil {
			c.stdin = map[int][]byte{}
		}
		c.stdin[n] = in
		c.mu.Unlock()
	}
	stdout, status := c.answer(inner)
	if c.respond != nil {
		if out, st, ok := c.respond(n, inner); ok {
			stdout, status = out, st
		}
	}
	if n == c.failAt {
		stdout, status = c.failOutput, c.failStatus
	}
	if n == c.hangAt {
		return nil // never exits, like a communicator that ignores ctx
	}
	go func() {
		io.WriteString(rc.Stdout, stdout)
		rc.SetExited(status)
	}()
	return nil
}

func (c *fakeComm) answer(inner string) (string, int) {
	img := c.img
	switch {
	case inner == cmdOSRelease:
		return img.osRelease, 0
	case inner == cmdArch:
		return img.arch + "\n", 0
	case inner == imagekernel.ListCommand:
		var b strings.Builder
		for _, k := range img.kernels {
			fmt.Fprintf(&b, "modules %s\x00boot vmlinuz-%s\x00", k, k)
		}
		return b.String(), 0
	case inner == imagestep.ListSourcesCommand:
		var b strings.Builder
		for _, p := range sortedKeys(img.sources) {
			fmt.Fprintf(&b, "%s%s\n%s\n", imagestep.SourceMarker, p, img.sources[p])
		}
		return b.String(), 0
	case inner == "cat /var/lib/dpkg/status":
		return img.dpkgStatus(), 0
	case strings.HasPrefix(inner, "cat '") && strings.HasSuffix(inner, "'"):
		if data, ok := img.files[strings.Trim(strings.TrimPrefix(inner, "cat "), "'")]; ok {
			return string(data), 0
		}
		return "", 1
	case strings.Contains(inner, " podvm-driver-probe "):
		return img.probe, 0
	case strings.Contains(inner, `for f in *.deb`):
		return strings.Join(sortedKeys(img.debs), "\n") + "\n", 0
	}
	return "", 0
}

func (c *fakeComm) Upload(path string, r io.Reader, _ *os.FileInfo) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	c.mu.Lock()
	fail := c.uploadFailures > 0
	if fail {
		c.uploadFailures--
	}
	c.mu.Unlock()
	if fail {
		c.record("upload failed: " + path)
		return errors.New("connection reset by peer")
	}
	c.mu.Lock()
	c.uploads[path] = data
	c.mu.Unlock()
	if utf8.Valid(data) && !bytes.ContainsRune(data, 0) && len(data) < 4096 {
		c.record(fmt.Sprintf("upload: %s\n%s", path, indentLines(string(data))))
	} else {
		c.record(fmt.Sprintf("upload: %s (binary)", path))
	}
	return nil
}

func indentLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    | " + l
	}
	return strings.Join(lines, "\n")
}

func (c *fakeComm) UploadDir(dst, src string, exclude []string) error {
	return errors.New("fakeComm: UploadDir not used by the provisioner")
}

func (c *fakeComm) Download(path string, w io.Writer) error {
	c.record("download: " + path)
	if data, ok := c.img.files[path]; ok {
		_, err := w.Write(data)
		return err
	}
	data, ok := c.img.debs[filepath.Base(path)]
	if !ok {
		return fmt.Errorf("%s: no such file", path)
	}
	_, err := w.Write(data)
	return err
}

func (c *fakeComm) DownloadDir(src, dst string, exclude []string) error {
	return errors.New("fakeComm: DownloadDir not used by the provisioner")
}

// recordingUi records Say and Error in the same log as the communicator,
// so a golden file shows progress and commands interleaved.
type recordingUi struct {
	packersdk.Ui
	comm *fakeComm
}

func (u *recordingUi) Say(s string)     { u.comm.record("ui: " + s) }
func (u *recordingUi) Error(s string)   { u.comm.record("ui error: " + s) }
func (u *recordingUi) Message(s string) { u.comm.record("ui output: " + s) }

// fakeIndexer stands in for bake.IndexRepo with fixed output, so golden
// files do not depend on signatures.
func fakeIndexer(ctx context.Context, _ bake.Spec, req bake.IndexInput) (*bake.Index, error) {
	names, err := aptrepo.FindDebs(req.DebDir)
	if err != nil {
		return nil, err
	}
	var pkgs []aptrepo.Package
	var index strings.Builder
	for _, p := range names {
		base := filepath.Base(p)
		f := strings.Split(strings.TrimSuffix(base, ".deb"), "_")
		pkgs = append(pkgs, aptrepo.Package{Name: f[0], Version: f[1], Architecture: f[2], Filename: base, Size: 4, SHA256: "fake"})
		fmt.Fprintf(&index, "Package: %s\nVersion: %s\nFilename: %s\n\n", f[0], f[1], base)
	}
	files := map[string]string{
		"Packages":    index.String(),
		"Release":     "Origin: podvm\nDate: " + req.Date.Format(time.RFC1123) + "\n",
		"InRelease":   "-----BEGIN PGP SIGNED MESSAGE-----\nfake\n",
		"Release.gpg": "fake signature\n",
		"keyring.gpg": "fake keyring\n",
	}
	for _, n := range sortedKeys(files) {
		if err := os.WriteFile(filepath.Join(req.OutDir, n), []byte(files[n]), 0o644); err != nil {
			return nil, err
		}
	}
	return &bake.Index{
		Files:       sortedKeys(files),
		Packages:    pkgs,
		Fingerprint: "FAKEFINGERPRINT",
		Keyring:     []byte("fake keyring\n"),
		ArmoredKey:  []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nfake\n-----END PGP PUBLIC KEY BLOCK-----\n"),
	}, nil
}

// dpkgStatus renders installed as the image's /var/lib/dpkg/status.
func (img *fakeImage) dpkgStatus() string {
	var b strings.Builder
	for _, l := range strings.Split(img.installed, "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 4 {
			continue
		}
		status := "install ok " + f[0]
		if f[0] == "hold" {
			status = "hold ok installed"
		}
		fmt.Fprintf(&b, "Package: %s\nStatus: %s\nVersion: %s\nArchitecture: %s\n\n", f[1], status, f[2], f[3])
	}
	return b.String()
}
