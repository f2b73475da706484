package imagekernel_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/chroot"
	"github.com/podvm-gpu/packer-plugin-podvm/chroot/chroottest"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel"
	"github.com/podvm-gpu/packer-plugin-podvm/imagekernel/kerneltest"
)

func TestCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"1.0", "1.0", 0}, {"1.0~rc1", "1.0", -1}, {"1.0", "1.0+b1", -1}, {"1:0.1", "2.0", 1},
		{"6.12.10-amd64", "6.12.9-amd64", 1}, {"6.12.57+deb13-amd64", "6.12.41+deb13-amd64", 1},
		{"550.163.01-2", "550.163.01-10", -1}, {"1.0a", "1.0", 1},
		{"6.1.0-10-amd64", "6.1.0-9-amd64", 1}, {"6.12.57~rc1+deb13-amd64", "6.12.57+deb13-amd64", -1},
	}
	for _, tt := range tests {
		if got := imagekernel.Compare(tt.a, tt.b); sign(got) != tt.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := imagekernel.Compare(tt.b, tt.a); sign(got) != -tt.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// check compares what one reader found in tree with the fixture's answer.
func check(t *testing.T, path string, tree kerneltest.Tree, got []string, err error) {
	t.Helper()
	if tree.Refused != "" {
		if err == nil || !strings.Contains(err.Error(), tree.Refused) || !strings.Contains(err.Error(), "not a kernel release") {
			t.Errorf("%s: %q, %v; want %q refused", path, got, err, tree.Refused)
		}
		return
	}
	if err != nil || !slices.Equal(got, tree.Want) {
		t.Errorf("%s: %q, %v; want %q", path, got, err, tree.Want)
	}
}

// Every reader of the image's kernels, on the same fixture trees: the host
// reader (the disk writer's) and the listing run inside the image (the
// provisioner's over its communicator and mkosi run-steps' through
// mkosi-chroot; here in a real chroot).
func TestTrees(t *testing.T) {
	chroottest.RequireRoot(t)
	for _, tree := range kerneltest.Trees {
		t.Run(tree.Name, func(t *testing.T) {
			host := t.TempDir()
			kerneltest.Build(t, host, tree)
			tr, err := imagekernel.ReadRoot(host, chroot.ResolveIn)
			if err != nil {
				t.Fatal(err)
			}
			got, err := imagekernel.Select(tr)
			check(t, "ReadRoot", tree, got, err)

			root := chroottest.BusyboxRoot(t)
			kerneltest.Build(t, root, tree)
			out, err := exec.Command("chroot", root, "/bin/sh", "-c", imagekernel.ListCommand).Output()
			if err != nil {
				t.Fatalf("ListCommand in a chroot: %v", err)
			}
			tr, err = imagekernel.ParseListing(string(out))
			if err != nil {
				t.Fatal(err)
			}
			got, err = imagekernel.Select(tr)
			check(t, "ListCommand", tree, got, err)

		})
	}
}

// A name holding a newline cannot forge a record of the listing.
func TestParseListing(t *testing.T) {
	tr, err := imagekernel.ParseListing("modules 6.1.0-9-amd64\x00modules x\nboot vmlinuz-6.1\x00image 6.1.0-9-amd64\x00boot vmlinuz-6.2\x00")
	if err != nil {
		t.Fatal(err)
	}
	want := imagekernel.Tree{Modules: []string{"6.1.0-9-amd64", "x\nboot vmlinuz-6.1"}, ModuleImages: []string{"6.1.0-9-amd64"}, Boot: []string{"vmlinuz-6.2"}}
	if !slices.Equal(tr.Modules, want.Modules) || !slices.Equal(tr.ModuleImages, want.ModuleImages) || !slices.Equal(tr.Boot, want.Boot) {
		t.Errorf("ParseListing = %q, want %q", tr, want)
	}
	if _, err := imagekernel.ParseListing("kernel 6.1\x00"); err == nil {
		t.Error("an unknown record was accepted")
	}
}

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"6.12.57+deb13-amd64": true, "6.8.0-1028-azure": true, "5.10.0-30-amd64": true, "6.12.57~rc1": true,
		"": false, "6": false, "linux": false, "6.1 x": false, "6.1$(id)": false, "6.1/../x": false, "6.1\n": false, "-6.1": false,
	} {
		if got := imagekernel.Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}
