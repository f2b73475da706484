package mkosi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvm-gpu/packer-plugin-podvm/bake"
)

func TestRecordDisk(t *testing.T) {
	for _, tt := range []struct {
		name, config string
		files        []string
		disk, err    string
	}{
		{name: "directory output", config: `{"Output": "image", "Format": "directory"}`},
		{name: "disk", config: `{"Output": "image", "Format": "disk"}`, files: []string{"image.raw", "image.efi"}, disk: "image.raw"},
		{name: "compressed disk", config: `{"Output": "system", "Format": "disk"}`, files: []string{"system.raw.zst"}, disk: "system.raw.zst"},
		{name: "no disk", config: `{"Output": "image", "Format": "disk"}`, err: "want one disk image.raw"},
		{name: "not JSON", config: `Output=image`, err: "config.json: invalid character"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out, arts := filepath.Join(dir, "out"), filepath.Join(dir, "out", "podvm-artifacts")
			if err := os.MkdirAll(arts, 0o755); err != nil {
				t.Fatal(err)
			}
			write := func(p, data string) {
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(dir, "config.json"), tt.config)
			write(filepath.Join(dir, "podvm-bake.json"), `{"repo": {"Dir": "/opt/local-packages"}}`)
			write(filepath.Join(arts, bake.ManifestFile), "{}\n")
			for _, f := range tt.files {
				write(filepath.Join(out, f), "disk bytes")
			}
			r := RecordDisk{Config: filepath.Join(dir, "config.json"), OutputDir: out, Artifacts: arts, Spec: filepath.Join(dir, "podvm-bake.json"), SrcDir: dir}
			disk, paths, err := r.Run()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(disk) != filepath.Base(tt.disk) || (tt.disk == "") != (len(paths) == 0) {
				t.Fatalf("disk %q, paths %v; want %q", disk, paths, tt.disk)
			}
			if tt.disk != "" {
				b, err := os.ReadFile(filepath.Join(arts, bake.DiskFile))
				if err != nil || !strings.Contains(string(b), `"file": "`+tt.disk+`"`) {
					t.Fatalf("%s: %v\n%s", bake.DiskFile, err, b)
				}
			}
		})
	}
}
