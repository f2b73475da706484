package aptrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// debSpec describes a .deb assembled in Go, so that most tests need no
// dpkg, and so that broken ones can be made on purpose.
type debSpec struct {
	control string // the control file's text
	comp    string // control.tar compression: "", "gz", "xz" or "zst"
	data    []byte // the data.tar.xz member's bytes (never unpacked)
}

func controlText(name, version, arch, depends string) string {
	s := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: Test <test@example.org>\n", name, version, arch)
	if depends != "" {
		s += "Depends: " + depends + "\n"
	}
	return s + "Description: test package " + name + "\n long description\n .\n second paragraph\n"
}

func tarBytes(t testing.TB, files ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	if err := tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(files); i += 2 {
		hdr := &tar.Header{Name: files[i], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[i+1])), ModTime: mtime}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func compress(t testing.TB, comp string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch comp {
	case "":
		return data
	case "gz":
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	case "xz":
		zw, err := xz.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		zw.Write(data)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	case "zst":
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		zw.Write(data)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown compression %q", comp)
	}
	return buf.Bytes()
}

// arMember is one member of an ar archive to assemble.
type arMember struct {
	name string
	data []byte
}

func arBytes(members ...arMember) []byte {
	var buf bytes.Buffer
	buf.WriteString(arMagic)
	for _, m := range members {
		fmt.Fprintf(&buf, "%-16s%-12d%-6d%-6d%-8o%-10d`\n", m.name, 1700000000, 0, 0, 0o100644, len(m.data))
		buf.Write(m.data)
		if len(m.data)%2 == 1 {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes()
}

func (s debSpec) bytes(t testing.TB) []byte {
	t.Helper()
	ctl := tarBytes(t, "./control", s.control, "./md5sums", "d41d8cd98f00b204e9800998ecf8427e  usr/share/doc/x/README\n")
	ctlName := "control.tar"
	if s.comp != "" {
		ctlName += "." + s.comp
	}
	data := s.data
	if data == nil {
		data = compress(t, "xz", tarBytes(t, "./usr/share/doc/x/README", "hello\n"))
	}
	return arBytes(
		arMember{"debian-binary", []byte("2.0\n")},
		arMember{ctlName, compress(t, s.comp, ctl)},
		arMember{"data.tar.xz", data},
	)
}

// writeDeb writes a Go-made .deb into dir and returns its path.
func writeDeb(t testing.TB, dir, file string, s debSpec) string {
	t.Helper()
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, s.bytes(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// dpkgDeb builds a .deb with the real dpkg-deb, compressing its members
// with comp (gzip, xz, zstd or none), and returns its path.
func dpkgDeb(t testing.TB, dir, file, control, comp string) string {
	t.Helper()
	need(t, "dpkg-deb")
	root := t.TempDir()
	name := strings.Fields(strings.SplitN(control, "\n", 2)[0])[1]
	doc := filepath.Join(root, "usr/share/doc", name)
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(doc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	// Some incompressible payload, so sizes and digests mean something.
	payload := bytes.Repeat([]byte(name+"\n"), 1000)
	if err := os.WriteFile(filepath.Join(doc, "README"), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, file)
	cmd := exec.Command("dpkg-deb", "--root-owner-group", "-Z"+comp, "--build", root, out)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, b)
	}
	return out
}

// testSigner returns an ephemeral signer created at date.
func testSigner(t testing.TB, date time.Time) *Signer {
	t.Helper()
	s, err := NewEphemeralSigner("aptrepo test key", date)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testDate is a fixed Release date, in the past of any test run.
var testDate = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// need skips the test when a tool is missing, or fails it when
// PODVM_REQUIRE_ROOT=1 (set by make check and CI, where every real-tool
// test must run).
func need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("PODVM_REQUIRE_ROOT") == "1" {
				t.Fatalf("%s not installed, and PODVM_REQUIRE_ROOT=1 says this test must run", tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
}

// have reports whether tool is installed, for checks a test adds when it
// can; under PODVM_REQUIRE_ROOT=1 a missing tool fails the test instead.
func have(t testing.TB, tool string) bool {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("PODVM_REQUIRE_ROOT") == "1" {
			t.Fatalf("%s not installed, and PODVM_REQUIRE_ROOT=1 says every check must run", tool)
		}
		t.Logf("%s not installed: skipping its checks", tool)
		return false
	}
	return true
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type tarWriter struct{ tw *tar.Writer }

func newTarWriter(w *bytes.Buffer) *tarWriter { return &tarWriter{tar.NewWriter(w)} }

func (w *tarWriter) symlink(t *testing.T, name, target string) {
	t.Helper()
	if err := w.tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}); err != nil {
		t.Fatal(err)
	}
	if err := w.tw.Close(); err != nil {
		t.Fatal(err)
	}
}
